#!/usr/bin/env python3
"""kvserve vs llama.cpp on the same GGUF file and thread count.

llama.cpp runs in this process through llama-cpp-python's low-level bindings (llama_decode on a
llama_batch, greedy argmax sampling in numpy); kvserve runs as `kvserve bench --json` (offline mode, the
continuous-batching Engine). Runs alternate between the two (and which goes first alternates too), and
each figure is the median over --repeats. Figures:

  decode    batch 1: --gen-len tokens after a --prompt-len-token prompt (tok/s after the first token)
  prefill   the same run's --prompt-len-token prompt (prompt tokens / time to first token)
  batched   --n-seqs sequences of --batch-prompt-len prompt tokens then --batch-gen-len tokens each, all
            in flight together: llama.cpp gets all prompts in one llama_batch (one seq id per sequence)
            and then one token per sequence per llama_decode; kvserve gets --batch n-seqs with a token
            budget that prefills them all in one step. Figure: decode tok/s over all sequences.

llama.cpp's figures can come from its own benchmark binaries instead (--llama-bench, and
--llama-batched-bench for the batched case; built from llama-cpp-python's sdist as compare_serving.py
shows, targets llama-bench and llama-batched-bench): `llama-bench -p P -n 0` for prefill, `llama-bench
-p 0 -n G -d P` (generation at depth P) for decode, `llama-batched-bench -npp P -ntg G -npl N` for
batched. Then llama-cpp-python is not needed. On a Xeon VM with AMX (2026-12-01) a -DGGML_NATIVE=ON build
died in ggml_backend_amx_mul_mat (SIGILL / SIGSEGV) although the kernel grants the AMX state. The cause
(2026-12-05): GCC 12's _tile_loadconfig names only the first 8 bytes of the tile configuration as its
operand, so the stores of the rows and column widths are dropped as dead (ldtilecfg then reads palette 1
with every tile unconfigured, and the first tileloadd is an illegal instruction); kvserve's AMX kernels
issue ldtilecfg themselves for that reason. A clang build (native, or with GGML_AMX_INT8=ON) runs, but
takes the repack kernels (ggml_gemm_q4_0_8x8_q8_0), not the AMX path: about the same prefill as below. There
configure with -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
-DGGML_AVX_VNNI=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON
(every instruction set that core has except AMX).

llama.cpp runs each case with flash attention off and on (--llama-fa best, the default) and each of its
figures is the better of the two: which one wins depends on the host and the case (the Emerald Rapids Xeon
VM, 2026-12-03: SmolLM2 Q4_1 batch-1 decode at depth 512 59.8 tok/s off against 34.9 on, where llama.cpp's
"auto" takes on; on Zen 5 its batched decode ran faster on). --llama-fa on / off / auto runs one setting.

The memory-bandwidth bound on decode is the STREAM triad bandwidth (measured in the same run with
`kvserve bench --triad`, same thread count) divided by the weight bytes read per token (as kvserve
counts them: every layer weight, the output projection, one embedding row); a batch of B sequences reads
the weights once per step, so its weight-only bound is B times that. A decode step also reads each
sequence's K/V (f16, `kvserve kv-calc` bytes per position) over its whole context, on average
prompt + gen/2 positions: the second bound counts those bytes too, so it is the one a decode that reads
nothing twice can reach.

The triad is taken before every repeat and after the last; the bound uses the best of them. On a host
whose bandwidth (and, with busy neighbours, compute) drifts within minutes, two more figures show the
spread: each repeat's kvserve/llama.cpp ratio (its two runs were taken back to back), and each kvserve
decode against the triads measured just before and after it. The same calls also measure what the host
reads alone (`kvserve bench --triad`'s read-only loop: 8 streams a thread, prefetched into L2), and each
decode's bytes per second are set against it too: a host can read well below its triad, which also writes.
And they time one cache line passed between kvserve's two first threads, which tells the placements of
a VM's vCPUs apart (sharing an L3 or not: on this project's Zen 4 host ~50-80 ns against ~350, and the
second reads ~1.5x faster while making every barrier and shared read of a decode step dearer).

On such a host even the triads right around a run can miss a switch of placement inside it. So each
repeat also runs kvserve's batch-1 decode once more with `--bound-segments N` (default 16; 0 skips it):
the decode is timed N steps at a time, with a short triad and the round trip measured between segments
on kvserve's own threads, and each segment is set against the better triad on its two sides. That figure
is kvserve's alone (llama.cpp is not measured this way); it is printed per placement (round trip below or
above SPLIT_ROUND_TRIP_NS) and is a target line of its own.

  python3 bench/compare_llamacpp.py -m model.gguf -t 2
  python3 bench/compare_llamacpp.py -m model.gguf -t 2 --prompt-len 64 --gen-len 16 \\
      --n-seqs 4 --batch-prompt-len 32 --batch-gen-len 16 --repeats 1
  python3 bench/compare_llamacpp.py -m model.gguf -t 2 --llama-bench lcpp/bin/llama-bench \\
      --llama-batched-bench lcpp/bin/llama-batched-bench
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time

try:
    import llama_cpp as L
except ImportError:  # pragma: no cover: only needed without --llama-bench
    L = None

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def find_kvserve():
    # The newest of the repo's builds, so a stale bench build never stands in for the current code.
    found = [os.path.join(REPO, d, "kvserve") for d in ("build", "build-bench", "build-ci")]
    found = [p for p in found if os.access(p, os.X_OK)]
    return max(found, key=os.path.getmtime) if found else "kvserve"


def kvserve_json(args, *extra):
    cmd = [args.kvserve, "bench", "-t", str(args.threads), "--json", *extra]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return json.loads(out.stdout)


def kvserve_run(args, n, prompt_len, gen_len, batch):
    j = kvserve_json(args, "-m", args.model, "-n", str(n), "--prompt-len", str(prompt_len),
                     "--output-len", str(gen_len), "--batch", str(batch),
                     "--max-num-batched-tokens", str(max(512, n * prompt_len)), "--seed", str(args.seed))
    if j["failed"]:
        raise RuntimeError("kvserve bench failed: %s" % j.get("first_error"))
    return j


def kv_bytes_per_position(args):
    # f16 K and V of one position over all layers, the cache type both engines run with here.
    out = subprocess.run([args.kvserve, "kv-calc", "-m", args.model, "--kv-dtype", "f16", "--json"], check=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return json.loads(out.stdout)["bytes_per_token"]


_log_cb = None


class LlamaCpp:
    # llama_flash_attn_type: LLAMA_FLASH_ATTN_TYPE_AUTO = -1, DISABLED = 0, ENABLED = 1.
    FA_TYPES = {"auto": -1, "off": 0, "on": 1}

    def __init__(self, path, threads):
        global _log_cb
        _log_cb = L.llama_log_callback(lambda level, text, user: None)  # keep a reference
        L.llama_log_set(_log_cb, ctypes.c_void_p())
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        self.model = L.llama_model_load_from_file(path.encode(), mp)
        if not self.model:
            raise RuntimeError("llama.cpp could not load " + path)
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.bos = L.llama_vocab_bos(self.vocab)
        self.threads = threads
        self.run(1, 16, 4, seed=12345, fa="auto")  # warm-up (page in the weights), as kvserve bench does

    def close(self):
        L.llama_model_free(self.model)

    def run(self, n_seqs, prompt_len, gen_len, seed, fa):
        import numpy as np  # only this path needs it
        rng = np.random.default_rng(seed)
        lo = min(100, self.n_vocab // 2)
        prompts = rng.integers(lo, self.n_vocab, size=(n_seqs, prompt_len), dtype=np.int64)
        if self.bos >= 0:
            prompts[:, 0] = self.bos
        cp = L.llama_context_default_params()
        n_ctx = n_seqs * (prompt_len + gen_len) + 256
        cp.n_ctx = n_ctx
        cp.n_batch = max(512, n_seqs * prompt_len)
        cp.n_ubatch = 512
        cp.n_seq_max = n_seqs
        cp.kv_unified = True
        cp.n_threads = self.threads
        cp.n_threads_batch = self.threads
        cp.no_perf = True
        cp.flash_attn_type = self.FA_TYPES[fa]
        ctx = L.llama_init_from_model(self.model, cp)
        if not ctx:
            raise RuntimeError("llama.cpp could not create a context")
        batch = L.llama_batch_init(max(n_seqs * prompt_len, n_seqs), 0, n_seqs)
        n_vocab = self.n_vocab

        def argmax(i):
            return int(np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, i), shape=(n_vocab,)).argmax())

        try:
            k = 0
            last = []
            for s in range(n_seqs):
                for i in range(prompt_len):
                    batch.token[k] = int(prompts[s, i])
                    batch.pos[k] = i
                    batch.n_seq_id[k] = 1
                    batch.seq_id[k][0] = s
                    batch.logits[k] = 1 if i == prompt_len - 1 else 0
                    k += 1
                last.append(k - 1)
            batch.n_tokens = k
            t0 = time.perf_counter()
            if L.llama_decode(ctx, batch) != 0:
                raise RuntimeError("llama_decode failed (prefill)")
            nxt = [argmax(i) for i in last]
            t1 = time.perf_counter()
            for step in range(1, gen_len):
                for s in range(n_seqs):
                    batch.token[s] = nxt[s]
                    batch.pos[s] = prompt_len + step - 1
                    batch.n_seq_id[s] = 1
                    batch.seq_id[s][0] = s
                    batch.logits[s] = 1
                batch.n_tokens = n_seqs
                if L.llama_decode(ctx, batch) != 0:
                    raise RuntimeError("llama_decode failed (decode)")
                nxt = [argmax(s) for s in range(n_seqs)]
            t2 = time.perf_counter()
        finally:
            L.llama_batch_free(batch)
            L.llama_free(ctx)
        return {
            "prefill_tokens_per_s": n_seqs * prompt_len / (t1 - t0),
            "decode_tokens_per_s": n_seqs * (gen_len - 1) / (t2 - t1) if gen_len > 1 else 0.0,
            "output_tokens_per_s": n_seqs * gen_len / (t2 - t0),
            "ttft_ms": (t1 - t0) * 1000,
        }


class LlamaCppBinaries:
    """llama.cpp's figures from its llama-bench and llama-batched-bench binaries (one run each call)."""

    def __init__(self, model, threads, bench, batched_bench):
        self.model, self.threads = model, threads
        self.bench, self.batched_bench = bench, batched_bench
        for path in (bench, batched_bench):
            if path and not os.access(path, os.X_OK):
                sys.exit("not an executable: %s" % path)
        # The binaries find their shared libraries beside them when built in place.
        self.env = dict(os.environ)
        dirs = {os.path.dirname(os.path.abspath(p)) for p in (bench, batched_bench) if p}
        self.env["LD_LIBRARY_PATH"] = ":".join(sorted(dirs) + [self.env.get("LD_LIBRARY_PATH", "")])

    def close(self):
        pass

    def _run(self, cmd):
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env)
        if out.returncode != 0:
            hint = ""
            if out.returncode < 0:
                hint = (" (killed by signal %d; a -DGGML_NATIVE=ON build on an AMX core runs ggml's AMX "
                        "kernels, which crashed on one Xeon VM: build without them, see this script's help)"
                        % -out.returncode)
            raise RuntimeError("%s failed (exit %d)%s: %s" % (os.path.basename(cmd[0]), out.returncode, hint,
                                                             out.stderr.strip()[-500:]))
        return out.stdout

    def _bench_ts(self, prompt, gen, depth, fa):
        # llama-bench's mean tokens/s of its one test (-r 1: the alternating repeats here give the median).
        rows = json.loads(self._run([self.bench, "-m", self.model, "-t", str(self.threads), "-p", str(prompt),
                                     "-n", str(gen), "-d", str(depth), "-fa", fa, "-r", "1", "-o", "json"]))
        if len(rows) != 1:
            raise RuntimeError("llama-bench printed %d results, expected 1" % len(rows))
        return rows[0]["avg_ts"]

    def run(self, n_seqs, prompt_len, gen_len, seed, fa):
        del seed  # the binaries make their own (random) prompts
        if n_seqs == 1:
            pp = self._bench_ts(prompt_len, 0, 0, fa)
            tg = self._bench_ts(0, gen_len, prompt_len, fa)
            t_pp, t_tg = prompt_len / pp, gen_len / tg
            return {"prefill_tokens_per_s": pp, "decode_tokens_per_s": tg,
                    "output_tokens_per_s": gen_len / (t_pp + t_tg), "ttft_ms": t_pp * 1000}
        if not self.batched_bench:
            sys.exit("the batched case needs --llama-batched-bench (or --skip-batched)")
        lines = self._run([self.batched_bench, "-m", self.model, "-t", str(self.threads), "-tb", str(self.threads),
                           "-npp", str(prompt_len), "-ntg", str(gen_len), "-npl", str(n_seqs), "-kvu",
                           "-c", str(n_seqs * (prompt_len + gen_len) + 256), "-b", str(max(512, n_seqs * prompt_len)),
                           "-ub", "512", "-fa", fa, "--output-format", "jsonl"]).split("\n")
        rows = [json.loads(x) for x in lines if x.startswith("{")]
        if len(rows) != 1:
            raise RuntimeError("llama-batched-bench printed %d results, expected 1" % len(rows))
        r = rows[0]
        return {"prefill_tokens_per_s": r["speed_pp"], "decode_tokens_per_s": r["speed_tg"],
                "output_tokens_per_s": n_seqs * gen_len / r["t"], "ttft_ms": r["t_pp"] * 1000}


# The single-stream and batched targets the project holds itself to against llama.cpp on the same machine
# and thread count (the benchmarks issue): each figure's median against its threshold. Indexes are into
# main()'s figures: decode, prefill, then batched decode and batched output unless skipped.
TARGETS = (
    ("decode tok/s, kvserve / llama.cpp", 0, "ratio", 1.15),
    ("decode tok/s / bound counting K/V, triads around each run", 0, "of_bound_with_kv", 0.85),
    ("prefill tok/s, kvserve / llama.cpp", 1, "ratio", 1.0),
    ("batched decode tok/s, kvserve / llama.cpp", 2, "ratio", 3.0),
    ("decode / bound with K/V, runs with steady triads around", 0, "of_bound_with_kv_steady", 0.85),
    ("decode / bound with K/V, segments against in-run triads", 0, "of_bound_segments", 0.85),
)


def llama_best_of_fa(lc, settings, repeat, n, prompt_len, gen_len, seed):
    """llama.cpp's run of one case under each flash-attention setting; each figure the better of them.

    The settings go in turn, first one then the other on alternate repeats. Tokens/s figures take the
    highest, time to first token the lowest; `flash_attn` says which setting gave each figure and
    `by_flash_attn` keeps every run.
    """
    order = list(settings) if repeat % 2 == 0 else list(reversed(settings))
    runs = {fa: lc.run(n, prompt_len, gen_len, seed, fa) for fa in order}
    best, used = {}, {}
    for key in runs[settings[0]]:
        pick = (min if key == "ttft_ms" else max)(settings, key=lambda fa: runs[fa][key])
        best[key], used[key] = runs[pick][key], pick
    best["flash_attn"] = used
    best["by_flash_attn"] = runs
    return best


# A core-to-core round trip above this says the two threads sat on different L3s (this project's Zen 4
# host: 50-80 ns sharing one, 300-700 ns apart).
SPLIT_ROUND_TRIP_NS = 200

# A run's triads before and after agree when the smaller is at least this share of the larger: the
# bandwidth it decoded under is then known. Where they differ (the host moved its vCPUs between a
# placement that reads at ~30 GB/s and one at ~50 during the run, 2026-11-29), the better of the two
# overstates what the run had.
STEADY_TRIADS = 0.85


def targets(figures, skip_batched):
    out = []
    for label, index, key, threshold in TARGETS:
        if skip_batched and index >= 2:
            continue
        f = figures[index]
        if key == "of_bound_with_kv":
            # Each run against the triads taken right around it (the same placement of the host's vCPUs).
            around = f.get("of_bound_with_kv_around_run")
            value = statistics.median(around) if around else f["kvserve"] / f["bound_with_kv"]
            per_repeat = around or []
        elif key == "of_bound_segments":
            segs = f.get("bound_segments")
            if not segs:
                continue
            # Each repeat's median over its segments; the value, the median over every segment.
            per_repeat = [statistics.median(x["of_bound"] for x in run) for run in f["bound_segments_runs"] if run]
            value = statistics.median(x["of_bound"] for x in segs)
            why = ""
        elif key == "of_bound_with_kv_steady":
            # The same, over the runs whose two triads agree (none: no value, not met).
            around = f.get("of_bound_with_kv_around_run")
            if not around:
                continue
            per_repeat = [x for x, steady in zip(around, f["decode_triads_steady"]) if steady]
            value = statistics.median(per_repeat) if per_repeat else None
            why = "no run had triads within %.0f%% of each other" % (100 * (1 - STEADY_TRIADS))
        else:
            value = f[key]
            per_repeat = f["pair_ratios"]
            why = "llama.cpp measured 0"
        # The same test on each repeat alone (its two runs back to back, or its run against the triads
        # around it): a median just past the threshold with most repeats under it says the host decided.
        per_repeat = [x for x in per_repeat if x is not None]
        out.append({"target": label, "value": value, "threshold": threshold,
                    "met": value is not None and value >= threshold, "per_repeat": per_repeat,
                    "repeats_met": sum(x >= threshold for x in per_repeat)})
        if value is None:
            out[-1]["why_no_value"] = why
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True, help="GGUF file (e.g. from kvserve gen-model)")
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count(), help="threads for both (default: all)")
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--gen-len", type=int, default=128)
    ap.add_argument("--n-seqs", type=int, default=16)
    ap.add_argument("--batch-prompt-len", type=int, default=128)
    ap.add_argument("--batch-gen-len", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kvserve", default=find_kvserve(), help="kvserve binary (default: the newest of build/, build-bench/, build-ci/)")
    ap.add_argument("--llama-bench", help="llama.cpp's llama-bench binary: its figures instead of llama-cpp-python's")
    ap.add_argument("--llama-batched-bench", help="llama.cpp's llama-batched-bench binary (with --llama-bench)")
    ap.add_argument("--llama-fa", choices=("best", "on", "off", "auto"), default="best",
                    help="llama.cpp's flash attention: best (default) runs it off and on and takes the better "
                         "figure of each; on, off or auto runs that one")
    ap.add_argument("--skip-batched", action="store_true")
    ap.add_argument("--bound-segments", type=int, default=16,
                    help="decode steps per segment of kvserve's extra in-run-triad decode (0: no such run)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = ap.parse_args()

    # The triad before every repeat and after the last: on a host whose bandwidth drifts within minutes,
    # each repeat's decode is also set against the triads measured just before and after it.
    triads = [kvserve_json(args, "--triad")["triad"]]
    if args.llama_batched_bench and not args.llama_bench:
        sys.exit("--llama-batched-bench goes with --llama-bench")
    if args.llama_bench:
        lc = LlamaCppBinaries(args.model, args.threads, args.llama_bench, args.llama_batched_bench)
    elif L is None:
        sys.exit("llama-cpp-python is not installed (python3 -m pip install llama-cpp-python), "
                 "and no --llama-bench was given")
    else:
        lc = LlamaCpp(args.model, args.threads)
    cases = [("single", 1, args.prompt_len, args.gen_len)]
    if not args.skip_batched:
        cases.append(("batched", args.n_seqs, args.batch_prompt_len, args.batch_gen_len))
    results = {name: {"kvserve": [], "llama.cpp": []} for name, *_ in cases}
    weight_bytes = None
    decode_triads = []  # per repeat: the triads just before and just after kvserve's batch-1 run
    decode_reads = []   # and the read-only bandwidths measured with them
    decode_handoffs = []  # and the core-to-core round trips (which placement the host's vCPUs were in)
    segment_runs = []  # per repeat: kvserve's decode segments, each against the triads right around it
    for r in range(args.repeats):
        for name, n, plen, glen in cases:
            order = ["kvserve", "llama.cpp"] if r % 2 == 0 else ["llama.cpp", "kvserve"]
            for who in order:
                if who == "kvserve":
                    # Batch-1 decode is bandwidth-bound: a triad right before and right after it (this host's
                    # two vCPUs move between placements whose triads differ up to 2.5x within minutes, so a
                    # triad taken with the other runs in between can belong to another placement).
                    # The same calls measure what the host reads alone (no writes), for decode's reads.
                    if n == 1:
                        t = kvserve_json(args, "--triad")
                        decode_triads.append(t["triad"]["best_gb_s"])
                        decode_reads.append(t["read"]["best_gb_s"])
                        decode_handoffs.append(t.get("handoff", {}).get("round_trip_ns", 0.0))
                    j = kvserve_run(args, n, plen, glen, n)
                    if n == 1:
                        t = kvserve_json(args, "--triad")
                        decode_triads.append(t["triad"]["best_gb_s"])
                        decode_reads.append(t["read"]["best_gb_s"])
                        decode_handoffs.append(t.get("handoff", {}).get("round_trip_ns", 0.0))
                    if n == 1 and args.bound_segments > 0:
                        js = kvserve_json(args, "-m", args.model, "-n", "1", "--prompt-len", str(plen),
                                          "--output-len", str(glen), "--batch", "1",
                                          "--max-num-batched-tokens", str(max(512, plen)), "--seed",
                                          str(args.seed), "--bound-segments", str(args.bound_segments))
                        segment_runs.append(js.get("bound_segments", []))
                    weight_bytes = j["weight_bytes_per_token"]
                    # Decode: the window where every sequence was decoding (the same as llama.cpp's pure
                    # decode loop; a request that finishes early would otherwise count its steps alone).
                    decode = j.get("steady_decode_tokens_per_s") or j["decode_tokens_per_s"]
                    results[name]["kvserve"].append({"prefill_tokens_per_s": j["prefill_tokens_per_s"],
                                                     "decode_tokens_per_s": decode,
                                                     "output_tokens_per_s": j["output_tokens_per_s"]})
                else:
                    settings = ("off", "on") if args.llama_fa == "best" else (args.llama_fa,)
                    results[name]["llama.cpp"].append(llama_best_of_fa(lc, settings, r, n, plen, glen, args.seed + r))
            print("repeat %d/%d %s done" % (r + 1, args.repeats, name), file=sys.stderr)
        triads.append(kvserve_json(args, "--triad")["triad"])
    lc.close()
    triad_best = [t["best_gb_s"] for t in triads]

    def med(name, who, key):
        return statistics.median(x[key] for x in results[name][who])

    bw = max(triad_best) * 1e9
    bound = bw / weight_bytes
    kv_pos = kv_bytes_per_position(args)
    # Bytes batch-1 decode reads per token: the weights and the K/V of the average position.
    per_token = weight_bytes + kv_pos * (args.prompt_len + args.gen_len / 2)

    def kv_bound(n_seqs, prompt_len, gen_len):
        # Tokens/s if a step read the weights once and each sequence's K/V once, at triad bandwidth.
        return n_seqs * bw / (weight_bytes + n_seqs * kv_pos * (prompt_len + gen_len / 2))
    rows = [
        ("decode tok/s (batch 1, %d after %d)" % (args.gen_len, args.prompt_len), "single", "decode_tokens_per_s",
         bound, kv_bound(1, args.prompt_len, args.gen_len)),
        ("prefill tok/s (%d-token prompt)" % args.prompt_len, "single", "prefill_tokens_per_s", None, None),
    ]
    if not args.skip_batched:
        rows.append(("batched decode tok/s (%d seqs, %d after %d)" % (args.n_seqs, args.batch_gen_len,
                                                                    args.batch_prompt_len),
                     "batched", "decode_tokens_per_s", bound * args.n_seqs,
                     kv_bound(args.n_seqs, args.batch_prompt_len, args.batch_gen_len)))
        rows.append(("batched output tok/s (incl. prefill)", "batched", "output_tokens_per_s", None, None))
    out = {"model": args.model, "threads": args.threads, "repeats": args.repeats,
           "triad_gb_s": bw / 1e9, "triads_gb_s": triad_best, "weight_bytes_per_token": weight_bytes,
           "kv_bytes_per_position": kv_pos,
           "bandwidth_bound_decode_tokens_per_s": bound, "figures": [], "runs": results,
           "llama_cpp_via": "llama-bench" if args.llama_bench else "llama-cpp-python",
           "llama_cpp_flash_attn": args.llama_fa}
    for label, case, key, b, bkv in rows:
        k, l = med(case, "kvserve", key), med(case, "llama.cpp", key)
        ks = [x[key] for x in results[case]["kvserve"]]
        ls = [x[key] for x in results[case]["llama.cpp"]]
        # Repeat r's two runs were taken one right after the other: their ratio is the figure least
        # moved by the host's drift.
        pair_ratios = [a / c if c else None for a, c in zip(ks, ls)]
        fig = {"figure": label, "kvserve": k, "llama.cpp": l, "ratio": k / l if l else None, "bound": b,
               "bound_with_kv": bkv, "kvserve_runs": ks, "llama.cpp_runs": ls, "pair_ratios": pair_ratios,
               "llama.cpp_flash_attn": [x["flash_attn"][key] for x in results[case]["llama.cpp"]]}
        if bkv:
            # Each repeat against the better of the triads just before and just after it (bkv scales
            # with the bandwidth).
            fig["of_bound_with_kv_adjacent"] = [x / (bkv * max(triad_best[r], triad_best[r + 1]) * 1e9 / bw)
                                                for r, x in enumerate(ks)]
            if case == "single":
                # Against the better of the triads taken right around the run itself.
                fig["decode_triads_gb_s"] = decode_triads
                fig["decode_triads_steady"] = [
                    min(decode_triads[2 * r], decode_triads[2 * r + 1]) >=
                    STEADY_TRIADS * max(decode_triads[2 * r], decode_triads[2 * r + 1]) for r in range(len(ks))]
                fig["of_bound_with_kv_around_run"] = [
                    x / (bkv * max(decode_triads[2 * r], decode_triads[2 * r + 1]) * 1e9 / bw)
                    for r, x in enumerate(ks)]
                # What each run read per second against the better read-only loop right around it: how
                # close decode comes to what this host reads at all (not a target; the triad also writes).
                fig["decode_reads_gb_s"] = decode_reads
                # On a host whose vCPUs move between sharing an L3 and not (tens of ns against hundreds for
                # one cache line between them), the placement each run saw: the faster-reading placement
                # also makes every barrier and every shared read dearer, so its decode / bound differs.
                fig["decode_round_trips_ns"] = decode_handoffs
                if segment_runs:
                    fig["bound_segments_runs"] = segment_runs
                    fig["bound_segments"] = [x for run in segment_runs for x in run]
                fig["reads_of_read_loop_around_run"] = [
                    x * per_token / (max(decode_reads[2 * r], decode_reads[2 * r + 1]) * 1e9)
                    for r, x in enumerate(ks)]
        out["figures"].append(fig)
    out["targets"] = targets(out["figures"], args.skip_batched)
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print("model %s, %d threads, median of %d alternating runs; llama.cpp through %s"
          % (args.model, args.threads, args.repeats, out["llama_cpp_via"]))
    print("triad %.1f GB/s, weights read per token %.1f MiB -> batch-1 decode bound %.1f tok/s; "
          "f16 K/V %d bytes per position" % (bw / 1e9, weight_bytes / 2**20, bound, kv_pos))
    print("triad before each repeat and after the last: %s GB/s" % " ".join("%.1f" % t for t in triad_best))
    print("llama.cpp's flash attention: %s" % ("the better of off and on for each figure and repeat"
                                               if args.llama_fa == "best" else args.llama_fa))
    print("%-48s %12s %12s %10s %14s  %s" % ("figure", "kvserve", "llama.cpp", "kv/llama", "bound",
                                            "kv/llama of each repeat's pair"))
    for f in out["figures"]:
        bstr = ("%.1f" % f["bound"]) if f["bound"] else "-"
        pairs = " ".join("%.2f" % x if x else "-" for x in f["pair_ratios"])
        fa = (" (llama.cpp fa %s)" % " ".join(f["llama.cpp_flash_attn"])) if args.llama_fa == "best" else ""
        print("%-48s %12.1f %12.1f %10.2f %14s  %s%s" % (f["figure"], f["kvserve"], f["llama.cpp"], f["ratio"], bstr,
                                                        pairs, fa))
    for f in out["figures"]:
        if f["bound"]:
            print("%s: kvserve at %.0f%% of the bound, llama.cpp at %.0f%%; counting K/V reads too (bound %.1f): "
                  "kvserve at %.0f%%, llama.cpp at %.0f%%"
                  % (f["figure"], 100 * f["kvserve"] / f["bound"], 100 * f["llama.cpp"] / f["bound"],
                     f["bound_with_kv"], 100 * f["kvserve"] / f["bound_with_kv"],
                     100 * f["llama.cpp"] / f["bound_with_kv"]))
            print("  each kvserve repeat against the triads measured next to it, counting K/V: %s"
                  % " ".join("%.0f%%" % (100 * x) for x in f["of_bound_with_kv_adjacent"]))
            if "of_bound_with_kv_around_run" in f:
                print("  each kvserve repeat against the better triad taken right before / after it (%s GB/s), "
                      "counting K/V: %s" % (" ".join("%.1f" % t for t in f["decode_triads_gb_s"]),
                                            " ".join("%.0f%%" % (100 * x) for x in f["of_bound_with_kv_around_run"])))
                print("  triads before and after within %.0f%% of each other (steady): %s"
                      % (100 * (1 - STEADY_TRIADS), " ".join("yes" if x else "no" for x in f["decode_triads_steady"])))
            if "reads_of_read_loop_around_run" in f:
                print("  each kvserve repeat's reads (weights + K/V) against the better read-only loop right before / "
                      "after it (%s GB/s): %s" % (" ".join("%.1f" % t for t in f["decode_reads_gb_s"]),
                                                 " ".join("%.0f%%" % (100 * x)
                                                          for x in f["reads_of_read_loop_around_run"])))
            if f.get("decode_round_trips_ns") and any(f["decode_round_trips_ns"]):
                print("  core-to-core round trip right before / after each kvserve repeat: %s ns"
                      % " ".join("%.0f" % x for x in f["decode_round_trips_ns"]))
            if f.get("bound_segments"):
                segs = f["bound_segments"]
                print("  kvserve's decode in segments of %d steps, each against in-run triads on its two sides "
                      "(%d segments): median %.2f of the bound with K/V"
                      % (args.bound_segments, len(segs), statistics.median(x["of_bound"] for x in segs)))
                for name, pick in (("sharing an L3", lambda x: x["round_trip_ns"] < SPLIT_ROUND_TRIP_NS),
                                   ("on different L3s", lambda x: x["round_trip_ns"] >= SPLIT_ROUND_TRIP_NS)):
                    part = [x for x in segs if pick(x)]
                    if part:
                        print("    round trip %s %d ns (%s): %d segments, median %.2f (%.2f-%.2f), triads %.1f-%.1f GB/s"
                              % ("<" if name == "sharing an L3" else ">=", SPLIT_ROUND_TRIP_NS, name, len(part),
                                 statistics.median(x["of_bound"] for x in part), min(x["of_bound"] for x in part),
                                 max(x["of_bound"] for x in part),
                                 min(max(x["triad_before_gb_s"], x["triad_after_gb_s"]) for x in part),
                                 max(max(x["triad_before_gb_s"], x["triad_after_gb_s"]) for x in part)))
    # What batch-1 decode actually read per second (weights + K/V), next to the triad: on a host whose
    # triad moves less than a read stream can, a fraction of the bound above 100 % says so.
    single = out["figures"][0]
    print("batch-1 decode reads: kvserve %.1f GB/s, llama.cpp %.1f GB/s (weights + K/V), triad %.1f GB/s"
          % (single["kvserve"] * per_token / 1e9, single["llama.cpp"] * per_token / 1e9, bw / 1e9))
    print("targets (medians; then each repeat alone):")
    for t in out["targets"]:
        # (A bound judged without triads around the runs has no per-repeat figures.)
        each = ("  (%s: met in %d of %d)" % (" ".join("%.2f" % x for x in t["per_repeat"]), t["repeats_met"],
                                             len(t["per_repeat"]))) if t["per_repeat"] else ""
        if t["value"] is None:
            print("  %-56s %8s  >= %.2f: %s" % (t["target"], "-", t["threshold"], t["why_no_value"]))
            continue
        print("  %-56s %8.2f  >= %.2f: %-7s%s"
              % (t["target"], t["value"], t["threshold"], "met" if t["met"] else "NOT met", each))


if __name__ == "__main__":
    main()
