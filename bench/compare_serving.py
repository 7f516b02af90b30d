#!/usr/bin/env python3
"""kvserve serve vs llama-server on the same GGUF file, threads and slots, measured by `kvserve bench --url`.

Workload (the serving target of the benchmarks issue): --clients concurrent clients, --requests requests,
each a shared --prefix-len-token prefix plus a distinct --suffix-len-token suffix, --output-len new tokens
(EOS ignored), greedy unless --temperature is given. Each server is started, warmed up, measured, and
stopped in turn; llama-server runs in each configuration of --llama-configs (default: without and with
flash attention) and the best is the baseline. TTFT on a prefix hit vs a cold prompt is measured one
request at a time: cold = random prompts of the same length, hit = shared-prefix prompts after the prefix
is cached.

llama-server is not on PyPI: build it from llama-cpp-python's sdist (vendor/llama.cpp) or point
--llama-server at any binary, e.g.

  pip download llama-cpp-python==0.3.36 --no-deps --no-binary :all: && tar xzf llama_cpp_python-*.tar.gz
  cmake -S llama_cpp_python-*/vendor/llama.cpp -B lcpp -DLLAMA_CURL=OFF && cmake --build lcpp -j --target llama-server
  python3 bench/compare_serving.py -m model.gguf -t 2 --llama-server lcpp/bin/llama-server
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def find_kvserve():
    # The newest of the repo's builds, so a stale bench build never stands in for the current code.
    found = [os.path.join(REPO, d, "kvserve") for d in ("build", "build-bench", "build-ci")]
    found = [p for p in found if os.access(p, os.X_OK)]
    return max(found, key=os.path.getmtime) if found else "kvserve"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url, proc, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("server exited with status %d" % proc.returncode)
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.5)
    raise RuntimeError("server at %s not ready after %ds" % (url, timeout))


def bench(args, url, *extra, seed=None):
    seed = args.seed if seed is None else seed
    cmd = [args.kvserve, "bench", "--url", url, "-m", args.model, "--json", "--seed", str(seed), *extra]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if out.returncode != 0:
        raise RuntimeError("%s exited with %d: %s" % (" ".join(cmd), out.returncode, out.stderr.strip()))
    return json.loads(out.stdout)


def measure(args, url):
    plen = args.prefix_len + args.suffix_len
    load = bench(args, url, "-n", str(args.requests), "-c", str(args.clients), "--prompts", "shared-prefix",
                 "--prompt-len", str(plen), "--prefix-len", str(args.prefix_len), "--output-len", str(args.output_len),
                 "--temperature", str(args.temperature))
    cold = bench(args, url, "-n", "4", "-c", "1", "--prompts", "random", "--prompt-len", str(plen),
                 "--output-len", "1", "--warmup", "0", seed=args.seed + 1000)
    hit = bench(args, url, "-n", "4", "-c", "1", "--prompts", "shared-prefix", "--prompt-len", str(plen),
                "--prefix-len", str(args.prefix_len), "--output-len", "1", "--warmup", "1")
    return load, cold, hit


def run_server(cmd, url, args, name):
    os.makedirs(args.log_dir, exist_ok=True)
    log = open(os.path.join(args.log_dir, name + ".log"), "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_ready(url, proc)
        return measure(args, url)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def summary(load, cold, hit):
    return {
        "output_tok_s": load["output_tokens_per_s"],
        "requests_s": load["requests_per_s"],
        "ttft_p50_ms": load["ttft_ms"]["p50"],
        "tpot_p50_ms": load["tpot_ms"]["p50"],
        "cold_ttft_p50_ms": cold["ttft_ms"]["p50"],
        "hit_ttft_p50_ms": hit["ttft_ms"]["p50"],
        "failed": load["failed"] + cold["failed"] + hit["failed"],
        "prefix_hit_rate": load["prefix_hit_rate"],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    ap.add_argument("--clients", type=int, default=16, help="concurrent clients = llama-server slots")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--prefix-len", type=int, default=256)
    ap.add_argument("--suffix-len", type=int, default=16)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--temperature", type=float, default=0.0,
                    help="sampling temperature of the measured load (0 = greedy; each server's other sampling "
                         "settings stay at its defaults)")
    ap.add_argument("--kvserve", default=find_kvserve())
    ap.add_argument("--llama-server", required=True, help="llama-server binary")
    ap.add_argument("--llama-configs", default="fa-off,fa-on",
                    help="comma-separated llama-server configurations to try: fa-off, fa-on")
    ap.add_argument("--log-dir", default="/tmp")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    per_slot = args.prefix_len + args.suffix_len + args.output_len + 16
    results = {}
    port = free_port()
    url = "http://127.0.0.1:%d" % port
    results["kvserve"] = summary(*run_server(
        [args.kvserve, "serve", "-m", args.model, "-t", str(args.threads), "--port", str(port),
         "--max-num-seqs", str(max(args.clients, 1))], url, args, "kvserve-serve"))
    for cfg in args.llama_configs.split(","):
        port = free_port()
        url = "http://127.0.0.1:%d" % port
        cmd = [args.llama_server, "-m", args.model, "-t", str(args.threads), "-tb", str(args.threads),
               "--port", str(port), "-np", str(args.clients), "-c", str(per_slot * args.clients),
               "-fa", "on" if cfg == "fa-on" else "off", "--no-webui"]
        results["llama-server " + cfg] = summary(*run_server(cmd, url, args, "llama-server-" + cfg))

    best = max((k for k in results if k != "kvserve"), key=lambda k: results[k]["output_tok_s"])
    kv = results["kvserve"]
    ratio = kv["output_tok_s"] / results[best]["output_tok_s"]
    if args.json:
        print(json.dumps({"results": results, "best_llama": best, "throughput_ratio": ratio}, indent=2))
        return
    print("model %s, %d threads, %d clients, %d requests of %d+%d prompt tokens and %d output tokens" %
          (args.model, args.threads, args.clients, args.requests, args.prefix_len, args.suffix_len, args.output_len))
    print("%-22s %12s %10s %12s %12s %14s %13s %7s" % ("server", "output tok/s", "req/s", "TTFT p50 ms",
                                                       "TPOT p50 ms", "cold TTFT ms", "hit TTFT ms", "failed"))
    for name, r in results.items():
        print("%-22s %12.1f %10.2f %12.1f %12.1f %14.1f %13.1f %7d" % (
            name, r["output_tok_s"], r["requests_s"], r["ttft_p50_ms"], r["tpot_p50_ms"], r["cold_ttft_p50_ms"],
            r["hit_ttft_p50_ms"], r["failed"]))
    print("aggregate output tok/s kvserve / best llama-server (%s): %.2f" % (best, ratio))
    for name, r in results.items():
        if r["cold_ttft_p50_ms"] > 0:
            print("%s: TTFT p50 on a prefix hit / cold prompt = %.2f" % (name, r["hit_ttft_p50_ms"] / r["cold_ttft_p50_ms"]))


if __name__ == "__main__":
    sys.exit(main())
