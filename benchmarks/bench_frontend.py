# Front-end benchmark: how long lexing, parsing and checking take on a large file.
#
# Generates a deterministic file of about 2,000 lines made of varied kernels
# (element-wise maps, matrix products, row reductions, loops with branches,
# atomics, shape builtins), each with several autotune configurations; parses
# it, checks every kernel under every configuration, and prints a table of
# lines, tokens and seconds per stage: lexing alone, parsing (lexing included),
# checking, and the total of parsing and checking - the time `phobos check`
# spends on the file.  The fastest of several runs is reported; `--json
# out.json` also writes the figures as JSON.
#
#   python benchmarks/bench_frontend.py [--lines 2000] [--repeat 5] [--json out.json]
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from phobos.compiler import parse_source  # noqa: E402
from phobos.frontend.lexer import tokenize  # noqa: E402
from phobos.frontend.sema import check_program, configurations  # noqa: E402

# Kernel templates: `{name}` is replaced by a unique kernel name, `{op}`,
# `{fn}` and `{scale}` by choices that vary the expressions.
TEMPLATES = [
    """\
// {name}: an element-wise map over one block of a vector.
@autotune(BLOCK in [128, 256, 512])
kernel {name}(x: tensor<f32>[N], y: tensor<f32>[N], out: tensor<f32>[N], alpha: f32) {{
    let base = program_id(0) * BLOCK
    let a = x[base :+ BLOCK]
    let b = y[base :+ BLOCK]
    out[base :+ BLOCK] = alpha * a {op} b * {scale} - {fn}(a) / (1.0 + b * b)
}}
""",
    """\
/* {name}: C = alpha * A @ B + beta * C, one TILE_M x TILE_N block per program. */
@autotune(TILE_M in [32, 64], TILE_N in [32, 64], TILE_K in [16, 32])
kernel {name}(A: tensor<f32>[M, K],
              B: tensor<f32>[K, N],
              C: tensor<f32>[M, N],
              alpha: f32,
              beta: f32) {{
    let pm = program_id(0)
    let pn = program_id(1)
    var acc: tile<f32>[TILE_M, TILE_N] = 0.0
    for kt in range(0, K, TILE_K) {{
        let a = A[pm * TILE_M :+ TILE_M, kt :+ TILE_K]
        let b = B[kt :+ TILE_K, pn * TILE_N :+ TILE_N]
        acc += dot(a, b)
    }}
    let c_old = C[pm * TILE_M :+ TILE_M, pn * TILE_N :+ TILE_N]
    C[pm * TILE_M :+ TILE_M, pn * TILE_N :+ TILE_N] = alpha * acc {op} beta * c_old
}}
""",
    """\
// {name}: a numerically stable softmax of ROWS rows of COLS elements.
@autotune(ROWS in [1, 2, 4], COLS in [64, 128])
kernel {name}(x: tensor<f32>[M, K], y: tensor<f32>[M, K]) {{
    let row = program_id(0) * ROWS
    let t = x[row :+ ROWS, 0 :+ COLS] * {scale}
    let m = max(t, axis=1)
    let e = {fn}(t - m)
    let s = sum(e, axis=1)
    y[row :+ ROWS, 0 :+ COLS] = e / s
}}
""",
    """\
// {name}: a strided accumulation with branches on the position.
@autotune(BLOCK in [64, 128], STEPS in [2, 4])
kernel {name}(x: tensor<f32>[N], out: tensor<f32>[N], n: i32, scale: f32) {{
    let pid = program_id(0)
    var acc: tile<f32>[BLOCK] = 0.0
    for i in range(0, STEPS) {{
        let offset = (pid * STEPS + i) * BLOCK
        if offset < n && i >= 0 {{
            acc += x[offset :+ BLOCK] * scale
        }} else if offset < n * 2 {{
            acc -= {scale}
        }} else {{
            acc = acc {op} 0.5
        }}
    }}
    out[pid * BLOCK :+ BLOCK] = where(acc > 0.0, acc, 0.0)
}}
""",
    """\
// {name}: lanes, masks, reshapes and an atomic total.
@autotune(TILE in [32, 64], GROUPS in [2, 4])
kernel {name}(x: tensor<f32>[N], best: tensor<i32>[G], total: tensor<f32>[1]) {{
    let base = program_id(0) * TILE
    let t = x[base :+ TILE]
    let lanes = arange(0, TILE)
    let masked = where(lanes % 2 == 0, t, full([TILE], 0.0))
    let groups = reshape(masked, [GROUPS, TILE / GROUPS])
    let winner = argmax(groups, axis=1)
    best[program_id(0) * GROUPS :+ GROUPS] = reshape(winner, [GROUPS])
    let partial: f32 = sum(groups) {op} {scale}
    atomic_add(total[0], {fn}(partial))
}}
""",
]
OPS = ["+", "-", "*"]
FUNCS = ["exp", "tanh", "sigmoid", "sqrt", "abs", "gelu"]
SCALES = ["2.0", "0.5", "1e-3", "3", "2.5e+1"]


def generate(target_lines: int, seed: int = 2024) -> str:
    """A Phobos file of at least `target_lines` lines; the same text for the same seed."""
    rng = random.Random(seed)
    parts: list[str] = []
    lines = 0
    while lines < target_lines:
        text = rng.choice(TEMPLATES).format(
            name=f"kernel_{len(parts)}", op=rng.choice(OPS), fn=rng.choice(FUNCS), scale=rng.choice(SCALES))
        parts.append(text)
        lines += text.count("\n") + 1
    return "\n".join(parts)


def measure(src: str) -> dict[str, float | int]:
    """Seconds to tokenize, parse and check `src` (all configurations), with its size."""
    start = time.perf_counter()
    tokens = tokenize(src, "bench.phobos")
    lexed = time.perf_counter()
    program = parse_source(src, "bench.phobos")
    parsed = time.perf_counter()
    errors = check_program(program)
    checked = time.perf_counter()
    if errors:
        raise SystemExit(f"the generated file does not check:\n{errors[0]}")
    return {
        "lines": src.count("\n") + 1,
        "tokens": len(tokens),
        "kernels": len(program.kernels),
        "configurations": sum(len(configurations(k)) for k in program.kernels),
        "lex_s": lexed - start,
        "parse_s": parsed - lexed,  # lexing included: the parser tokenizes on its own
        "check_s": checked - parsed,
        "total_s": checked - lexed,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Time the Phobos front end on a generated file.")
    ap.add_argument("--lines", type=int, default=2000, help="size of the generated file")
    ap.add_argument("--repeat", type=int, default=5, help="runs; the fastest is reported")
    ap.add_argument("--json", metavar="OUT.json", help="also write the figures here")
    args = ap.parse_args(argv)
    src = generate(args.lines)
    parse_source(src, "bench.phobos")  # builds the lexer and parser tables once, outside the timing
    best = min((measure(src) for _ in range(args.repeat)), key=lambda r: r["total_s"])
    columns = [("lines", "lines", "d"), ("tokens", "tokens", "d"), ("kernels", "kernels", "d"),
               ("configs", "configurations", "d"), ("lex s", "lex_s", ".3f"), ("parse s", "parse_s", ".3f"),
               ("check s", "check_s", ".3f"), ("total s", "total_s", ".3f")]
    print(" ".join(f"{title:>8}" for title, _, _ in columns))
    print(" ".join(f"{best[key]:>8{fmt}}" for _, key, fmt in columns))
    if args.json:
        Path(args.json).write_text(json.dumps(best, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
