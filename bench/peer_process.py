"""How bench_text.py and bench_image_model.py run each system: a process of its own, its peak RSS."""
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
