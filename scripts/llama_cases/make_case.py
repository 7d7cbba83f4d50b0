#!/usr/bin/env python3
"""Writes tests/data/cases/NAME.json: llama.cpp's greedy completions of PROMPT files on one model.

  make_case.py NAME MODEL PROMPT...
    MODEL: shared:models/FILE.gguf (a file of ../shared), or
           synth:ARCH:PRESET:TYPE:SEED:TOKENIZER (made by `diskformer synth`, TOKENIZER a file of ../shared)

Environment: LLAMA_BIN (llama.cpp's bin folder, with llama-completion), LLAMA_LIBS (LD_LIBRARY_PATH for it: the
AVX2 build's libggml-cpu first, see README.md), LLREF (the built llref), DISKFORMER (the CLI), SHARED (../shared).
"""
import base64
import json
import os
import subprocess
import sys
import tempfile

N, THREADS, CTX = 64, 2, 2048
root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
shared = os.environ.get('SHARED', os.path.join(root, '..', 'shared'))
env = dict(os.environ, LD_LIBRARY_PATH=os.environ['LLAMA_LIBS'])
completion = os.path.join(os.environ['LLAMA_BIN'], 'llama-completion')


def llref(model, prompt_file, extra=()):
    r = subprocess.run([os.environ['LLREF'], '-m', model, '-f', prompt_file, '-n', str(N), '-t', str(THREADS), '-c',
                        str(CTX), *extra], env=env, capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


def main():
    name, spec, prompts = sys.argv[1], sys.argv[2], sys.argv[3:]
    tmp = tempfile.mkdtemp()
    if spec.startswith('shared:'):
        model, desc = os.path.join(shared, spec[7:]), {'shared': spec[7:]}
    else:
        _, arch, preset, typ, seed, tok = spec.split(':')
        args = ['--arch', arch, '--preset', preset, '--type', typ, '--seed', seed]
        model = os.path.join(tmp, 'model.gguf')
        subprocess.run([os.environ['DISKFORMER'], 'synth', *args, '--tokenizer-from', os.path.join(shared, tok),
                        '--quiet', '-o', model], check=True)
        desc = {'synth': args, 'tokenizer_from': tok}
    cases = []
    for pf in prompts:
        ref = llref(model, pf)
        ids = [s['id'] for s in ref['steps']]
        stable = None  # measured on the shorter prompts only (a one-token prefill of a long one is slow)
        if len(ref['prompt_ids']) <= 250:
            stable = ids == [s['id'] for s in llref(model, pf, ('-ub', '1', '-b', '1'))['steps']]
        want = base64.b64decode(ref['text_b64']) + b'\n\n'
        checked = False
        for _ in range(3):  # llama-completion is not reproducible under CPU contention
            out = subprocess.run([completion, '-m', model, '-f', pf, '-n', str(N), '--temp', '0', '-no-cnv',
                                  '--no-warmup', '-s', '1', '--no-display-prompt', '--ignore-eos', '-c', str(CTX),
                                  '-t', str(THREADS), '--swa-full'], env=env, capture_output=True).stdout
            if out == want:
                checked = True
                break
        print(name, os.path.basename(pf), len(ref['prompt_ids']), 'stable', stable, 'checked', checked, flush=True)
        cases.append({'prompt': open(pf).read(), 'prompt_ids': ref['prompt_ids'], 'n_predict': N,
                      'completion_ids': ids, 'completion_b64': ref['text_b64'], 'stable': stable,
                      'completion_checked': checked,
                      'top2': [[s['id'], s['l1'], s['id2'], s['l2']] for s in ref['steps']]})
    doc = {
        'reference': {
            'llama_cpp': 'the 2026-08 snapshot in ../shared/tools/llama.cpp (llama.cpp-src.tar.xz, sha256 '
                         'fbae3030db4ed3ff5f6ae02ddd091477cbd238fd2d8c54b2159d7116bcc4d267; its source names no commit), '
                         'CPU backend built for AVX2: GGML_NATIVE=OFF GGML_AVX=ON GGML_AVX2=ON GGML_FMA=ON GGML_F16C=ON '
                         'GGML_BMI2=ON GGML_AVX512=OFF',
            'command': 'llama-completion -m MODEL -f PROMPT -n 64 --temp 0 -no-cnv --no-warmup -s 1 '
                       '--no-display-prompt --ignore-eos -c 2048 -t 2 --swa-full',
            'notes': 'completion_ids and top2 ([id, logit, second id, its logit] per step, end-of-generation tokens '
                     'banned) read through libllama with the same settings (n_batch 2048, n_ubatch 512, 2 threads); '
                     'completion_b64: the bytes of the pieces of those tokens, which llama-completion printed (without '
                     'its closing blank line) where completion_checked; stable: the same tokens with -b 1 -ub 1 '
                     '(prompts of up to 250 tokens; null on longer ones); completion_checked: llama-completion printed '
                     'completion_b64 (it is not reproducible under CPU contention, so a false means its runs here '
                     'disagreed, not that the tokens are in doubt)',
        },
        'model': desc, 'threads': THREADS, 'n_ctx': CTX}
    head = json.dumps(doc, indent=1, ensure_ascii=False)
    body = ',\n'.join('  ' + json.dumps(c, ensure_ascii=False) for c in cases)
    path = os.path.join(root, 'tests', 'data', 'cases', name + '.json')
    with open(path, 'w') as f:
        f.write(head[:-2] + ',\n "cases": [\n' + body + '\n ]\n}\n')


if __name__ == '__main__':
    main()
