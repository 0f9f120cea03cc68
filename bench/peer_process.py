"""How bench_text.py and bench_image_model.py run each system: a process of its own, its peak RSS; and
the best of several rounds."""
import json
import os
import subprocess


def measure(command, environment=None):
    """Runs one system in its own process; returns its JSON line and its peak RSS in MiB."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment)
    _, status, usage = os.wait4(process.pid, 0)
    out, err = process.stdout.read(), process.stderr.read()
    if status != 0:
        return {"error": (err or out).strip().splitlines()[-1:] or ["failed"]}
    result = json.loads(out.strip().splitlines()[-1])
    result["peak_rss_mib"] = usage.ru_maxrss / 1024.0
    return result


def ratios(rate):
    """The engine's f32 rate over the best f32 peer's, and its bf16 rate over the best peer's of any
    dtype (0 where a side is missing), from {system: items per second}."""
    peers_f32 = max([rate.get(s, 0) for s in ("torch-f32", "ort-f32")] or [0])
    peers_all = max([rate.get(s, 0) for s in ("torch-f32", "torch-bf16", "ort-f32")] or [0])
    f32_ratio = rate.get("uform-f32", 0) / peers_f32 if peers_f32 else 0
    bf16_ratio = rate.get("uform-bf16", 0) / peers_all if peers_all else 0
    return f32_ratio, bf16_ratio


def print_best(rows, systems, key):
    """Each system's best figure over the rounds per case and batch, and the ratios of those bests: on a
    shared machine the other tenants only ever slow a measurement down, so the best is the least disturbed."""
    print(f"# best of {max(r['round'] for r in rows)} rounds", flush=True)
    cases = []
    for r in rows:
        if (r["case"], r["batch"]) not in cases:
            cases.append((r["case"], r["batch"]))
    for case, batch in cases:
        best = {s: max((r["results"][s].get(key, 0.0) for r in rows if (r["case"], r["batch"]) == (case, batch)),
                       default=0.0) for s in systems}
        f32_ratio, bf16_ratio = ratios(best)
        print(f"{case:<14} {batch:>5} " + " ".join(f"{best[s]:>16.2f}" for s in systems) +
              f" {f32_ratio:>8.2f}x {bf16_ratio:>9.2f}x", flush=True)


def rotated(systems, round_index):
    """The systems in the order of round `round_index`: rotated by one each round, so load on a shared
    machine falls on every system alike."""
    shift = round_index % len(systems)
    return systems[shift:] + systems[:shift]


def run_rounds(rounds, run_round, systems, key, as_json):
    """`rounds` tables of `run_round(round_index)` (rows tagged with their round), each system's best
    over them when there are several, then every row as JSON where `as_json`."""
    rows = []
    for round_index in range(rounds):
        if rounds > 1:
            print(f"# round {round_index + 1} of {rounds}", flush=True)
        rows += run_round(round_index)
    if rounds > 1:
        print_best(rows, systems, key)
    if as_json:
        print(json.dumps(rows))
