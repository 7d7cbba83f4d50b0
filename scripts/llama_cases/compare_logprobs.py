#!/usr/bin/env python3
"""diskformer's top-n log-probabilities (run --n-probs) against llama.cpp's (llref --top, the log-softmax of its logits,
as llama-server's n_probs) on the gold prompts of ../shared/models, step by step while both chose the same tokens.

  LLREF=./llref DISKFORMER=../../build/diskformer ./compare_logprobs.py [MODEL.gguf ...]

Prints per model: steps compared, steps whose top-n ids agree (as sets), the largest log-probability difference of an
id both list, and the steps after which the greedy tokens parted (their first step where the chosen ids differ)."""
import json, os, subprocess, sys, tempfile, glob

N, TOP = 32, 5
llref = os.environ.get("LLREF", "./llref")
disk = os.environ.get("DISKFORMER", "../../build/diskformer")
shared = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../shared/models")
models = sys.argv[1:] or sorted(glob.glob(os.path.join(shared, "*.gguf")))

for model in models:
    gold = model[:-len(".gguf")] + ".gold.json"
    if not os.path.exists(gold):
        continue
    steps = same_sets = 0
    worst = 0.0
    parted = []
    for case in json.load(open(gold))["cases"]:
        ids = case["prompt_ids"]
        ref = subprocess.run([llref, "-m", model, "--ids", ",".join(map(str, ids)), "-n", str(N), "--top", str(TOP),
                              "-t", "2"], capture_output=True, text=True, check=True)
        ref_steps = json.loads(ref.stdout)["steps"]
        with tempfile.TemporaryDirectory() as d:
            prompt, probs = os.path.join(d, "p.txt"), os.path.join(d, "probs.jsonl")
            with open(prompt, "w", encoding="utf-8", newline="") as f:
                f.write(case["prompt"])
            subprocess.run([disk, "run", "-m", model, "-f", prompt, "-n", str(N), "--temp", "0", "--ignore-eos", "-t", "2",
                            "--backend", "cpu", "--n-probs", str(TOP), "--probs-file", probs],
                           capture_output=True, check=True)
            ours = [json.loads(l) for l in open(probs)]
        for k, (r, o) in enumerate(zip(ref_steps, ours)):
            mine = {e["id"]: e["logprob"] for e in o["top_logprobs"]}
            theirs = {i: lp for i, lp in r["top"]}
            steps += 1
            same_sets += set(mine) == set(theirs)
            for i in set(mine) & set(theirs):
                worst = max(worst, abs(mine[i] - theirs[i]))
            if r["id"] != o["id"]:
                parted.append(k)
                break
    print(f"{os.path.basename(model)}: {steps} steps, top-{TOP} ids agree on {same_sets}, "
          f"largest difference {worst:.2e}, parted at steps {parted or 'none'}")
