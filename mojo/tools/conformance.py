"""The conformance test: walks the reference's item list (reference_items.json, derived from
seed/executors.md by reference_items.py) and fails if the Mojo package lacks anything, or spells it
differently: struct signatures and conformances, public fields and their types, members and their
numeric values, every method signature (argument names, order, defaults, types), whether it
raises, and that its docstring names the C function the reference names, which must be declared
in include/uform.h. The package's side comes from `mojo doc`, so this also proves the docstrings
build. Exits 0 when everything matches, 1 listing every difference.
"""

import argparse
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_items import normalize  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mojo", required=True)
    parser.add_argument("--reference", required=True)
    parser.add_argument("--package", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--header", default=os.path.join(os.path.dirname(__file__), "..", "..", "include", "uform.h"))
    arguments = parser.parse_args()

    os.makedirs(arguments.out, exist_ok=True)
    doc_path = os.path.join(arguments.out, "uform-doc.json")
    result = subprocess.run([arguments.mojo, "doc", arguments.package, "-o", doc_path], capture_output=True, text=True)
    noise = [line for line in (result.stdout + result.stderr).splitlines() if "Crashpad" not in line]
    if result.returncode != 0 or not os.path.exists(doc_path):
        print("FAILED: mojo doc could not build the package's documentation:\n" + "\n".join(noise))
        return 1
    if any("warning" in line for line in noise):
        print("mojo doc warnings:\n" + "\n".join(noise))
    doc = json.load(open(doc_path, encoding="utf-8"))
    reference = json.load(open(arguments.reference, encoding="utf-8"))
    header = open(arguments.header, encoding="utf-8").read()
    exported = open(os.path.join(arguments.package, "__init__.mojo"), encoding="utf-8").read()

    structs, aliases = {}, {}
    for module in doc["decl"]["modules"]:
        for struct in module.get("structs", []):
            structs[struct["name"]] = struct
        for alias in module.get("aliases", []):
            aliases[alias["name"]] = alias

    failures, checked = [], 0

    def fail(message):
        failures.append(message)

    def export_check(name):
        if not re.search(r"\b" + re.escape(name) + r"\b", exported):
            fail(f"{name} is not exported by `from uform import ...` (uform/__init__.mojo)")

    def functions(struct):
        return {function["name"]: function["overloads"] for function in struct.get("functions", [])}

    for item in reference["items"]:
        checked += 1
        kind, name = item["kind"], item["name"]
        if kind == "struct":
            struct = structs.get(name)
            if struct is None:
                fail(f"struct {name} is missing")
                continue
            export_check(name)
            if normalize(struct["signature"]) != item["signature"]:
                fail(f"{name}: signature `{struct['signature']}`, the reference has `{item['signature']}`")
            traits = sorted(t["name"] for t in struct["parentTraits"] if t["name"] != "AnyType")
            if traits != item["traits"]:
                fail(f"{name}: conforms to {traits}, the reference lists {item['traits']}")
            fields = [(f["name"], f["type"]) for f in struct["fields"]]
            expected = [(f["name"], f["type"]) for f in item["fields"]]
            if fields != expected:
                fail(f"{name}: fields {fields}, the reference has {expected}")
            for field in struct["fields"]:
                if not field.get("summary") and not field.get("description"):
                    fail(f"{name}.{field['name']}: no docstring")
            members = {a["name"]: a.get("value") for a in struct.get("aliases", [])}
            for member in item["members"]:
                checked += 1
                if member["name"] not in members:
                    fail(f"{name}.{member['name']} is missing")
                elif normalize(members[member["name"]] or "") != normalize(member["value"]):
                    fail(f"{name}.{member['name']} = {members[member['name']]}, the reference has {member['value']}")
            parameters = [p["name"] for p in struct.get("parameters", [])]
            for parameter in item["parameters"]:
                if parameter["name"] not in parameters:
                    fail(f"{name}: parameter {parameter['name']} is missing")
            if not struct.get("summary"):
                fail(f"{name}: no docstring")
        elif kind == "method":
            struct = structs.get(item["struct"])
            if struct is None:
                continue  # reported with the struct
            overloads = functions(struct).get(name)
            if overloads is None:
                fail(f"{item['struct']}.{name} is missing")
                continue
            by_signature = {normalize(o["signature"]): o for o in overloads}
            for signature in item["signatures"]:
                overload = by_signature.get(signature)
                if overload is None:
                    fail(f"{item['struct']}.{name}: no overload `{signature}`; the package has {sorted(by_signature)}")
                    continue
                if bool(overload.get("raises")) != item["raises"]:
                    fail(f"{item['struct']}.{name}: raises={overload.get('raises')}, the reference says {item['raises']}")
                text = (overload.get("summary") or "") + " " + (overload.get("description") or "")
                if not overload.get("summary"):
                    fail(f"{item['struct']}.{name}: no docstring")
                if item["calls"]:
                    if f"Calls `{item['calls']}`" not in text:
                        fail(f"{item['struct']}.{name}: its docstring does not say it calls `{item['calls']}`")
                    if not re.search(r"\b" + item["calls"] + r"\s*\(", header):
                        fail(f"{item['struct']}.{name}: `{item['calls']}` is not declared in include/uform.h")
        elif kind == "named":
            if name in ("Address", "NULL_ADDRESS"):
                if name not in aliases:
                    fail(f"{name} is missing")
                export_check(name)
                continue
            struct = structs.get(name)
            if struct is None:
                fail(f"{name} is missing")
                continue
            export_check(name)
            members = {a["name"] for a in struct.get("aliases", [])}
            for member in item.get("members", []):
                if member not in members:
                    fail(f"{name}.{member} is missing")
            for method in item.get("methods", []):
                if method not in functions(struct):
                    fail(f"{name}.{method} is missing")
            if name == "Error":
                status = {a["name"] for a in structs.get("Status", {}).get("aliases", [])}
                fields = {f["name"] for f in struct["fields"]}
                if "kind" not in fields:
                    fail("Error has no `kind` field")
                for error_kind in item["kinds"]:
                    if error_kind not in status:
                        fail(f"Error kind {error_kind} is not a Status member")

    if failures:
        print(f"FAILED: {len(failures)} differences from the reference ({checked} items walked):")
        for failure in failures:
            print("  - " + failure)
        return 1
    print(f"conformance: all {checked} reference items are present and spelled as the reference spells them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
