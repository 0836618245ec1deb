"""Write moeplan/planner/model/ggml_table.py from the installed gguf-py.

    python scripts/gen_ggml_table.py           # rewrite the table
    python scripts/gen_ggml_table.py --check   # exit 1 when the committed table differs

gguf-py is the source of truth for ggml's type sizes and llama.cpp's file-type ids, but
importing it runs gguf/__init__, which loads numpy, yaml and gguf.metadata (about 0.15 s of
CPU): the planner reads this generated copy instead, and tests/test_ggml_table.py fails when
the installed gguf disagrees with it.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

TARGET = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      "moeplan", "planner", "model", "ggml_table.py")


def tables() -> tuple[str, dict[str, tuple[int, int, int]], dict[int, str]]:
    """(gguf version, name -> (type id, elements per block, bytes per block), file-type id -> name)
    as the installed gguf-py has them, in its enum order."""
    from importlib.metadata import version

    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, LlamaFileType

    types = {t.name: (int(t), *GGML_QUANT_SIZES[t]) for t in GGMLQuantizationType}
    ftypes = {int(f): f.name for f in LlamaFileType}
    return version("gguf"), types, ftypes


def render() -> str:
    ver, types, ftypes = tables()
    out = ['"""ggml tensor types and llama.cpp file types, copied from gguf-py ' + ver + ' (generated).',
           "",
           "Do not edit: `python scripts/gen_ggml_table.py` writes it from the installed gguf-py",
           "(gguf.constants GGMLQuantizationType, GGML_QUANT_SIZES, LlamaFileType), and",
           "tests/test_ggml_table.py fails when the installed gguf-py disagrees. The planner reads this",
           "copy because importing gguf loads numpy, yaml and gguf.metadata.",
           '"""',
           "from __future__ import annotations",
           "",
           f"GGUF_VERSION = \"{ver}\"",
           "",
           "# name -> (GGMLQuantizationType id, elements per block, bytes per block), gguf-py's order",
           "GGML_TYPES: dict[str, tuple[int, int, int]] = {"]
    out += [f"    \"{name}\": ({tid}, {block}, {size})," for name, (tid, block, size) in types.items()]
    out += ["}", "", "# llama.cpp general.file_type id -> LlamaFileType name",
            "LLAMA_FILE_TYPES: dict[int, str] = {"]
    out += [f"    {fid}: \"{name}\"," for fid, name in ftypes.items()]
    out += ["}", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare, do not write")
    a = ap.parse_args(argv)
    text = render()
    if a.check:
        with open(TARGET, encoding="utf-8") as f:
            same = f.read() == text
        print("ggml_table.py is " + ("up to date" if same else "out of date: run scripts/gen_ggml_table.py"))
        return 0 if same else 1
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(TARGET), suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, TARGET)
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
