"""`-ot` patterns that keep the routed experts of chosen blocks on the CPU, and their check.

llama.cpp matches every override with `std::regex_search` (ECMAScript) in command-line order,
first match wins (src/llama-model-loader.cpp). The patterns here use only the syntax ECMAScript
and Python's `re` read the same way (literals, `\\.`, `[0-9]` classes, `|`, groups, `^`, `$`),
so checking them with `re.search` against the model's real tensor names checks what llama.cpp
will do. They contain no `,` (separates overrides in `-ot`), no `;` (separates overrides in
llama-bench), no `=` (separates the pattern from the buffer type).

A pattern is anchored on the expert *weights*: `^blk\\.(3|[5-9])\\.ffn_(up|down|gate|gate_up)_(ch|)exps\\.weight$`,
so expert biases (gpt-oss `ffn_*_exps.bias`) and other per-expert tensors stay on the GPU, as
the planner's memory accounting assumes (ModelSpec group 'experts' vs 'expert_aux').
"""
from __future__ import annotations

import re
from collections.abc import Iterable

from moeplan.errors import InputError, MoeplanError
from moeplan.planner.model.spec import ModelSpec

# The expert matrices llama.cpp names (src/llama-arch.cpp): ffn_{up,down,gate}_exps,
# ffn_gate_up_exps (fused) and ffn_{up,down,gate}_chexps; the same alternation as mainline's
# LLM_FFN_EXPS_REGEX, closed on `.weight`.
EXPERT_WEIGHT_SUFFIX = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps\.weight$"
CPU_BUFFER = "CPU"
# Longest layer alternation put in one pattern before starting another one (readability only;
# llama.cpp has no limit that matters here).
MAX_ALTERNATION_CHARS = 400


def _digit_class(lo: int, hi: int) -> str:
    if lo == hi:
        return str(lo)
    if hi == lo + 1:
        return f"[{lo}{hi}]"
    return f"[{lo}-{hi}]"


def _same_width_pieces(lo: str, hi: str) -> list[str]:
    """Regex pieces matching exactly the numbers lo..hi written with len(lo) == len(hi) digits."""
    if lo == hi:
        return [lo]
    w = len(lo)
    if w == 1:
        return [_digit_class(int(lo), int(hi))]
    if lo[0] == hi[0]:
        return [lo[0] + p for p in _same_width_pieces(lo[1:], hi[1:])]
    out: list[str] = []
    first_full, last_full = int(lo[0]), int(hi[0])
    if lo[1:] != "0" * (w - 1):
        out += _same_width_pieces(lo, lo[0] + "9" * (w - 1))
        first_full += 1
    tail: list[str] = []
    if hi[1:] != "9" * (w - 1):
        tail = _same_width_pieces(hi[0] + "0" * (w - 1), hi)
        last_full -= 1
    if first_full <= last_full:
        out.append(_digit_class(first_full, last_full) + "[0-9]" * (w - 1))
    return out + tail


def range_pieces(lo: int, hi: int) -> list[str]:
    """Regex alternatives matching exactly the decimal numbers lo..hi (no leading zeros)."""
    out: list[str] = []
    width = len(str(lo))
    while lo <= hi:
        top = min(hi, 10**width - 1)
        out += _same_width_pieces(str(lo), str(top))
        lo, width = top + 1, width + 1
    return out


def _runs(indices: Iterable[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for i in sorted(set(indices)):
        if runs and i == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


def _run_alternatives(lo: int, hi: int) -> list[str]:
    """The shorter of listing the numbers and the range regex for one contiguous run."""
    listed = [str(i) for i in range(lo, hi + 1)]
    ranged = range_pieces(lo, hi)
    return listed if len("|".join(listed)) <= len("|".join(ranged)) else ranged


def layer_alternations(indices: Iterable[int], max_chars: int = MAX_ALTERNATION_CHARS) -> list[str]:
    """Alternations (`3|[5-9]|1[0-9]`) covering `indices`, split into chunks of whole runs so
    that none is much longer than `max_chars`."""
    chunks: list[list[str]] = [[]]
    for lo, hi in _runs(indices):
        alts = _run_alternatives(lo, hi)
        current = "|".join(chunks[-1])
        if chunks[-1] and len(current) + 1 + len("|".join(alts)) > max_chars:
            chunks.append([])
        chunks[-1].extend(alts)
    return ["|".join(c) for c in chunks if c]


def expert_patterns(cpu_layers: Iterable[int]) -> tuple[str, ...]:
    """The `-ot` patterns (without `=CPU`) for the routed experts of `cpu_layers`."""
    out = []
    for alt in layer_alternations(cpu_layers):
        group = f"({alt})" if "|" in alt else alt  # a single number or class needs no group
        out.append(rf"^blk\.{group}{EXPERT_WEIGHT_SUFFIX}")
    return tuple(out)


def override_args(patterns: Iterable[str], buffer: str = CPU_BUFFER) -> tuple[str, ...]:
    """`pattern=CPU` values, one per `-ot`."""
    return tuple(f"{p}={buffer}" for p in patterns)


def first_match(patterns: Iterable[str], name: str) -> int | None:
    """Index of the first pattern that matches `name` (llama.cpp's rule), or None."""
    for i, p in enumerate(patterns):
        if re.search(p, name):
            return i
    return None


def check_patterns(model: ModelSpec, cpu_layers: Iterable[int], patterns: Iterable[str]) -> tuple[str, ...]:
    """Problems with `patterns` against the model's real tensor names; () when they are exact.

    Exact means: every routed-expert weight of a CPU layer matches, and no other tensor does
    (not the experts of other layers, not expert biases or scales, not NextN blocks).
    """
    cpu = set(cpu_layers)
    pats = tuple(patterns)
    problems: list[str] = []
    for p in pats:
        for bad in (",", ";", "="):
            if bad in p:
                problems.append(f"pattern {p!r} contains {bad!r}, which -ot reads as a separator")
        try:
            re.compile(p)
        except re.error as exc:
            problems.append(f"pattern {p!r} does not compile: {exc}")
            return tuple(problems)
    moe_blocks = {layer.index for layer in model.layers if layer.kind == "moe"}
    for block in sorted(cpu - moe_blocks):
        problems.append(f"block {block} has no routed experts but is listed as a CPU layer")
    for t in model.tensors:
        want = t.group == "experts" and t.layer in cpu
        hit = first_match(pats, t.name) is not None
        if want and not hit:
            problems.append(f"{t.name} should stay on the CPU but no pattern matches it")
        elif hit and not want:
            problems.append(f"{t.name} matches a CPU pattern but the plan keeps it on the GPU")
    return tuple(problems)


class PatternError(MoeplanError):
    """An emitted -ot pattern does not place exactly the plan's tensors (a moeplan bug)."""

    exit_code = 1
    kind = "internal"


def checked_expert_patterns(model: ModelSpec, cpu_layers: Iterable[int]) -> tuple[str, ...]:
    """expert_patterns(), verified against the model's tensor names before anything is emitted."""
    layers = tuple(sorted(set(cpu_layers)))
    moe_blocks = {layer.index for layer in model.layers if layer.kind == "moe"}
    stray = [i for i in layers if i not in moe_blocks]
    if stray:  # a plan for another model (or another file), not a pattern bug
        raise InputError(f"the plan keeps the experts of block {stray[0]} on the CPU, but block {stray[0]} of "
                         f"{model.name} has no routed experts",
                         "was the plan made for another model? re-plan with `moeplan tune`")
    pats = expert_patterns(layers)
    problems = check_patterns(model, layers, pats)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise PatternError(f"-ot patterns do not match the plan: {problems[0]}{more}",
                           "this is a moeplan bug: please report it with the plan and the model's name")
    return pats
