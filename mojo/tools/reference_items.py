"""Derives the reference's item list from seed/executors.md, the Mojo reference of UForm.

    python3 mojo/tools/reference_items.py ../shared/seed/executors.md mojo/reference_items.json

Every struct (its signature, conformances, public fields with their types, members with their
values), every method (its signatures exactly as written, whether it raises, the C function it
says it calls), and the items the reference names in prose (Mood and its members, Status.CONTENDED,
the Error kinds it links, Library.gpu_devices, NULL_ADDRESS, Address). The committed JSON is what
mojo/tools/conformance.py walks; rerun this script when the reference changes.
"""

import json
import re
import sys


def normalize(signature: str) -> str:
    """One line, single spaces, no space after an opening or before a closing bracket."""
    signature = re.sub(r"\s+", " ", signature.strip())
    signature = re.sub(r"([\[(]) ", r"\1", signature)
    signature = re.sub(r" ([\])])", r"\1", signature)
    signature = re.sub(r",([\])])", r"\1", signature)
    return signature


def parse(text: str) -> list:
    items = []
    struct = None
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    for section in sections:
        title, _, body = section.partition("\n")
        title = title.strip()
        blocks = re.findall(r"```mojo\n(.*?)```", body, re.S)
        struct_block = next((b for b in blocks if b.lstrip().startswith("struct ")), None)
        if struct_block is not None:
            conforms = re.search(r"^Conforms to: (.*)$", body, re.M)
            struct = {
                "kind": "struct",
                "name": title,
                "signature": normalize(struct_block),
                "summary": body.strip().split("\n")[0],
                "traits": sorted(re.findall(r"`(\w+)`", conforms.group(1))) if conforms else [],
                "fields": [],
                "members": [],
                "parameters": [],
            }
            for line in body.split("\n"):
                member = re.match(r"^- `(\w+)` = `([^`]+)`: (.*)$", line)
                field = re.match(r"^- `(\w+)` `([^`]+)`: (.*)$", line)
                parameter = re.match(r"^- `(\w+)` \(comptime\): (.*)$", line)
                if member:
                    struct["members"].append({"name": member[1], "value": member[2], "doc": member[3]})
                elif field:
                    struct["fields"].append({"name": field[1], "type": field[2], "doc": field[3]})
                elif parameter:
                    struct["parameters"].append({"name": parameter[1], "doc": parameter[2]})
            items.append(struct)
            continue
        signatures = [normalize(b) for b in blocks if b.lstrip().startswith("def ")]
        if not signatures or struct is None:
            continue
        name = re.match(r"def (\w+)", signatures[0]).group(1)
        calls = re.search(r"Calls `(uform_\w+)`", body)
        items.append({
            "kind": "method",
            "struct": struct["name"],
            "name": name,
            "heading": title,
            "signatures": signatures,
            "summary": body.strip().split("\n")[0],
            "raises": bool(re.search(r"^Raises:", body, re.M)),
            "calls": calls.group(1) if calls else None,
        })
    return items


def prose(text: str) -> list:
    """Items the reference names without a section of their own."""
    items = [
        {"kind": "named", "name": "Mood", "members": ["PARKED", "SPINNING"], "source": "drain(mood: Mood = Mood.PARKED), threads.drain(Mood.SPINNING)"},
        {"kind": "named", "name": "Status", "members": ["CONTENDED"], "source": "finishes at once with `Status.CONTENDED`"},
        {"kind": "named", "name": "Library", "methods": ["gpu_devices"], "source": "Library.gpu_devices"},
        {"kind": "named", "name": "Address", "source": "`address` `Address`"},
        {"kind": "named", "name": "NULL_ADDRESS", "source": "`NULL_ADDRESS` runs inline"},
    ]
    kinds = sorted(set(re.findall(r"errors\.md#([A-Z_]+)\)", text)))
    items.append({"kind": "named", "name": "Error", "kinds": kinds, "source": "Raises: [`Error`](...errors.md#Error) with ..."})
    return items


def main():
    reference, out = sys.argv[1], sys.argv[2]
    text = open(reference, encoding="utf-8").read()
    items = parse(text) + prose(text)
    with open(out, "w", encoding="utf-8") as file:
        json.dump({"reference": "seed/executors.md", "items": items}, file, indent=1)
        file.write("\n")
    print(f"{out}: {len(items)} items")


if __name__ == "__main__":
    main()
