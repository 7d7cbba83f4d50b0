#!/usr/bin/env python3
"""The published shapes at a few layers: llama.cpp's greedy tokens (llref) against diskformer's CPU, 64 tokens.

The cases of tests/data/cases are tiny models, which CI remakes from their seeds; these are the real widths (a few
GB each, too large for CI), where other code paths and orders can apply (row counts that interleave or not, tinyBLAS
tiles, chunked attention past 512 cells). Usage, with the variables of make_case.py's example (LLAMA_LIBS, LLREF,
DISKFORMER) and a scratch folder for the models:

  ./real_shapes.py SCRATCH_DIR P1.txt [P2.txt ...]

Each line: model, prompt, prompt tokens, the tokens both give before they part (64 / 64 where all agree) and, where
they part, llama.cpp's margin between its two best logits there.
"""
import json
import os
import subprocess
import sys

root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..'))
shared = os.environ.get('SHARED', os.path.join(root, '..', 'shared'))
env = dict(os.environ, LD_LIBRARY_PATH=os.environ['LLAMA_LIBS'])
N, THREADS, CTX = 64, 2, 2048

MODELS = {
    'q36-q4_k_m-l4': ['--arch', 'qwen35moe', '--preset', 'qwen3.6-35b-a3b', '--layers', '4', '--type', 'q4_k_m',
                      '--tokenizer-from', 'models/qwen35moe-q8_0.gguf'],
    'q36-iq4_xs-l4': ['--arch', 'qwen35moe', '--preset', 'qwen3.6-35b-a3b', '--layers', '4', '--type', 'iq4_xs',
                      '--tokenizer-from', 'models/qwen35moe-q8_0.gguf'],
    'q30-q4_k_m-l2': ['--arch', 'qwen3moe', '--preset', 'qwen3-30b-a3b', '--layers', '2', '--type', 'q4_k_m',
                      '--seed', '7', '--tokenizer-from', 'models/qwen3moe-q8_0.gguf'],
    'g26-q4_0-l6': ['--arch', 'gemma4', '--preset', '26b-a4b', '--layers', '6', '--type', 'q4_0',
                    '--tokenizer-from', 'models/gemma4-moe-q8_0.gguf'],
    'g26-q4_k_m-l6': ['--arch', 'gemma4', '--preset', '26b-a4b', '--layers', '6', '--type', 'q4_k_m',
                      '--tokenizer-from', 'models/gemma4-moe-q8_0.gguf'],
}


def main():
    scratch, prompts = sys.argv[1], sys.argv[2:]
    os.makedirs(scratch, exist_ok=True)
    for name, args in MODELS.items():
        model = os.path.join(scratch, name + '.gguf')
        if not os.path.exists(model):
            args = [a if not a.startswith('models/') else os.path.join(shared, a) for a in args]
            subprocess.run([os.environ['DISKFORMER'], 'synth', *args, '--quiet', '-o', model], check=True)
        for pf in prompts:
            r = subprocess.run([os.environ['LLREF'], '-m', model, '-f', pf, '-n', str(N), '-t', str(THREADS), '-c',
                                str(CTX)], env=env, capture_output=True, text=True, check=True)
            ref = json.loads(r.stdout)
            probs = os.path.join(scratch, 'probs.txt')
            subprocess.run([os.environ['DISKFORMER'], 'run', '-m', model, '-f', pf, '-n', str(N), '--temp', '0',
                            '-t', str(THREADS), '-c', str(CTX), '--ignore-eos', '--n-probs', '1', '--probs-file',
                            probs], capture_output=True, check=True)
            want = [s['id'] for s in ref['steps']]
            got = [json.loads(line)['id'] for line in open(probs) if line.strip()]
            n = 0
            while n < min(len(want), len(got)) and want[n] == got[n]:
                n += 1
            part = ''
            if n < len(want):
                s = ref['steps'][n]
                part = f"  parts there, llama.cpp's margin {s['l1'] - s['l2']:.4f}"
            print(f"{name} {os.path.basename(pf)} {len(ref['prompt_ids'])} tokens: {n} / {len(want)}{part}",
                  flush=True)


if __name__ == '__main__':
    main()
