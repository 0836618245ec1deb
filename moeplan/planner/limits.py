"""Input limits: the range of every number moeplan accepts, and why (pure).

Every input kind goes through these checks before any work that scales with it: model
metadata (GGUF header, Hugging Face config, bundled profile), hardware profiles, plan JSON
and command-line flags. A value outside its range raises the error class of its input kind
(ModelFormatError: exit 3, ProbeError: exit 4, InputError: exit 2) with one line naming the
field, the value and the limit, and a hint. docs/input-limits.md lists them for users.

The limits are far above every released model and machine and far below what would make a
per-layer list, a per-expert table or a header read take unbounded time or memory.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from moeplan.errors import InputError, ModelFormatError, MoeplanError, ProbeError

if TYPE_CHECKING:
    from moeplan.planner.model.hf_config import HfKeys


@dataclass(frozen=True)
class Limit:
    """A range of accepted values and the reason for it."""

    low: float
    high: float
    reason: str


# ---- model shape --------------------------------------------------------------------------------
MAX_LAYERS = 1000
MAX_EXPERTS = 100_000
MAX_DIM = 2**20
MAX_CTX = 2**24
MAX_HEADS = 2**16
MAX_VOCAB = 2**24

LAYERS = Limit(1, MAX_LAYERS, "the deepest released MoE has 94 blocks (Qwen3-235B); the planner builds "
                              "per-layer lists, so the count bounds its time and memory")
EXPERTS = Limit(0, MAX_EXPERTS, "released MoEs route over at most 512 experts (Qwen3.5); per-expert "
                                "tables scale with the count")
DIM = Limit(0, MAX_DIM, "the widest released hidden or FFN width is 29,568 (Qwen2-72B); 2^20 leaves 35x "
                        "headroom and keeps per-tensor byte counts exact")
CTX = Limit(0, MAX_CTX, "the longest trained context is 10M tokens (Llama 4 Scout); KV cache sizes scale "
                        "with it (2^24 = 16M tokens)")
HEADS = Limit(0, MAX_HEADS, "released models use at most 128 attention heads")
VOCAB = Limit(0, MAX_VOCAB, "released vocabularies have at most ~262k tokens (Gemma 3)")

# ---- GGUF header --------------------------------------------------------------------------------
MAX_TENSOR_DIM = 2**40  # one ggml dimension; tensor elements are bounded by the file's bytes too
MAX_TENSOR_ELEMENTS = 2**50
MAX_GGUF_ARRAY_DEPTH = 4  # gguf-py writes arrays of arrays one level deep at most
MAX_ALIGNMENT = 2**16  # ggml's GGML_MEM_ALIGN-style alignments are 32 .. 4096

# ---- run shape (flags and plan fields) ----------------------------------------------------------
MAX_UBATCH = 65536  # llama.cpp caps n_ubatch by n_batch; larger compute buffers exceed any GPU
MAX_BATCH = 2**20
MAX_DRAFT = 64  # speculative decoding drafts 1..16 tokens in practice
MAX_SEQ = 4096  # llama.cpp LLAMA_MAX_SEQ is 256; vLLM/SGLang batch more
MAX_PROMPT = MAX_CTX
MAX_THREADS = 2**16  # when the machine's logical CPU count is unknown

# ---- hardware -----------------------------------------------------------------------------------
MAX_GPUS = 256
MAX_NUMA_NODES = 1024  # Linux CONFIG_NODES_SHIFT <= 10
MAX_CPUS = 2**16
MAX_BYTES = 2**60  # 1 EiB: any memory or file size beyond it is a corrupt field
MAX_RATE = 1e16  # bytes/s or flop/s: 10 PB/s or 10 Pflop/s on one device is not a real figure


def describe(value: Any) -> str:
    s = repr(value) if isinstance(value, str) else str(value)
    return s if len(s) <= 40 else s[:37] + "..."


def as_int(value: Any, field: str, err: type[MoeplanError], hint: str) -> int:
    """An integer field: int, or a float with an integral value (JSON 4096.0). Not bool/str."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise err(f"{field} = {describe(value)} is not a whole number", hint)
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise err(f"{field} = {describe(value)} is not a whole number", hint)
        value = int(value)
    return int(value)


def check_int(value: Any, field: str, limit: Limit, err: type[MoeplanError], hint: str,
              low: float | None = None, high: float | None = None) -> int:
    """`value` as an int within [low, high] (default: the limit's); raises `err` naming the field."""
    n = as_int(value, field, err, hint)
    lo = limit.low if low is None else low
    hi = limit.high if high is None else high
    if n < lo:
        raise err(f"{field} = {n} is below the minimum {int(lo)}", hint)
    if n > hi:
        # the limit's reason is in docs/input-limits.md; the message stays one short line
        raise err(f"{field} = {n} is above the limit {int(hi)}", hint)
    return n


def check_number(value: Any, field: str, low: float, high: float, err: type[MoeplanError], hint: str,
                 *, low_open: bool = False) -> float:
    """A finite number in [low, high] ((low, high] with low_open)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise err(f"{field} = {describe(value)} is not a number", hint)
    x = float(value)
    if not math.isfinite(x):
        raise err(f"{field} = {describe(value)} is not a finite number", hint)
    if x < low or (low_open and x <= low):
        raise err(f"{field} = {describe(value)} must be {'above' if low_open else 'at least'} {low:g}", hint)
    if x > high:
        raise err(f"{field} = {describe(value)} is above the limit {high:g}", hint)
    return x


# ---- model metadata (GGUF keys without the `{arch}.` prefix) ----------------------------------

# key -> limit; a key may hold one value or a per-layer array (llama.cpp get_key_or_arr)
HPARAM_LIMITS: dict[str, Limit] = {
    "embedding_length": Limit(1, MAX_DIM, DIM.reason),  # every width and head size derives from it
    "feed_forward_length": DIM,
    "expert_feed_forward_length": DIM,
    "expert_shared_feed_forward_length": DIM,
    "expert_count": EXPERTS,
    "expert_used_count": EXPERTS,
    "expert_shared_count": EXPERTS,
    "expert_group_count": EXPERTS,
    "expert_group_used_count": EXPERTS,
    "leading_dense_block_count": Limit(0, MAX_LAYERS, LAYERS.reason),
    "nextn_predict_layers": Limit(0, MAX_LAYERS, LAYERS.reason),
    "context_length": CTX,
    "vocab_size": VOCAB,
    "attention.head_count": HEADS,
    "attention.head_count_kv": HEADS,
    "attention.key_length": DIM,
    "attention.value_length": DIM,
    "attention.key_length_mla": DIM,
    "attention.value_length_mla": DIM,
    "attention.key_length_swa": DIM,
    "attention.value_length_swa": DIM,
    "attention.output_lora_rank": DIM,
    "attention.output_group_count": HEADS,
    "attention.indexer.top_k": CTX,
    "attention.compress_ratios": CTX,
    "embedding_length_out": DIM,
    "expert_gating_func": Limit(0, 16, "llama.cpp's gating functions are numbered 0..3"),
    "hash_layer_count": Limit(0, MAX_LAYERS, LAYERS.reason),
    "hyper_connection.count": HEADS,
    "interleave_moe_layer_step": Limit(0, MAX_LAYERS, LAYERS.reason),
    "attention.kv_lora_rank": DIM,
    "attention.q_lora_rank": DIM,
    "attention.indexer.key_length": DIM,
    "attention.indexer.head_count": HEADS,
    "attention.sliding_window": CTX,
    "attention.sliding_window_pattern": Limit(0, MAX_LAYERS, LAYERS.reason),
    "full_attention_interval": Limit(1, MAX_LAYERS, LAYERS.reason),
    "rope.dimension_count": DIM,
    "ssm.conv_kernel": Limit(0, 1024, "convolution kernels of released models are 4 wide"),
    "ssm.inner_size": DIM,
    "ssm.state_size": DIM,
    "ssm.group_count": HEADS,
    "ssm.time_step_rank": HEADS,
}


def check_hparams(hp: dict[str, Any], where: str, prefix: str = "") -> None:
    """Range-check model hyper-parameters before anything loops over them.

    Raises ModelFormatError naming `prefix + key`, its value and the limit."""
    hint = "the model's metadata is corrupt or not a real model; re-convert or download it again"

    def field(key: str) -> str:
        return f"{where}: {prefix}{key}"

    if "block_count" in hp:
        check_int(hp["block_count"], field("block_count"), LAYERS, ModelFormatError, hint)
    for key, limit in HPARAM_LIMITS.items():
        if key not in hp or hp[key] is None:
            continue
        value = hp[key]
        if isinstance(value, (list, tuple)):
            if len(value) > MAX_LAYERS + 1:
                raise ModelFormatError(f"{field(key)} has {len(value)} entries, above the limit {MAX_LAYERS}",
                                       hint)
            for i, v in enumerate(value):
                if isinstance(v, bool):
                    continue  # per-layer flag arrays (sliding_window_pattern)
                check_int(v, f"{field(key)}[{i}]", limit, ModelFormatError, hint)
        elif hasattr(value, "length") and hasattr(value, "item_type"):  # a long GGUF array
            raise ModelFormatError(f"{field(key)} is an array of {len(value)} entries, above the limit "
                                   f"{MAX_LAYERS}", hint)
        elif isinstance(value, bool) and key == "attention.sliding_window_pattern":
            continue
        else:
            check_int(value, field(key), limit, ModelFormatError, hint)
    n_experts = hp.get("expert_count")
    used = hp.get("expert_used_count")
    if isinstance(used, (list, tuple)):  # per layer (get_key_or_arr): llama.cpp checks the largest
        used = max((v for v in used if isinstance(v, int) and not isinstance(v, bool)), default=None)
    if isinstance(n_experts, int) and isinstance(used, int) and not isinstance(used, bool) and used > n_experts:
        raise ModelFormatError(f"{field('expert_used_count')} = {used} is above {prefix}expert_count = {n_experts}",
                               "a token cannot use more experts than the model has; the metadata is corrupt")
    if isinstance(n_experts, int) and not isinstance(n_experts, bool) and n_experts > 0 \
            and (used is None or (isinstance(used, int) and used < 1)):
        # llama-model.cpp load_hparams (0c1e570) asserts n_expert_used_max > 0 when n_expert > 0
        shown = "missing" if used is None else f"= {used}"
        raise ModelFormatError(f"{field('expert_used_count')} {shown} with {n_experts} experts: a MoE routes "
                               "each token to at least one expert", hint)
    blocks = hp.get("block_count")
    nextn = hp.get("nextn_predict_layers")
    if isinstance(blocks, int) and isinstance(nextn, int) and nextn >= blocks:
        raise ModelFormatError(f"{field('nextn_predict_layers')} = {nextn} leaves no trunk block "
                               f"(block_count = {blocks})", hint)


# Hugging Face config.json keys, checked before the config is mapped to GGUF keys
HF_LIMITS: dict[str, Limit] = {
    "num_hidden_layers": LAYERS,
    "hidden_size": Limit(1, MAX_DIM, DIM.reason),
    "intermediate_size": DIM,
    "num_attention_heads": HEADS,
    "num_key_value_heads": HEADS,
    "head_dim": DIM,
    "kv_lora_rank": DIM,
    "q_lora_rank": DIM,
    "qk_rope_head_dim": DIM,
    "qk_nope_head_dim": DIM,
    "v_head_dim": DIM,
    "num_nextn_predict_layers": Limit(0, MAX_LAYERS, LAYERS.reason),
    "max_position_embeddings": CTX,
    "vocab_size": VOCAB,
    "sliding_window": CTX,
}
# the MoE facts, under the names each architecture's record gives them (HfKeys), a name in
# its `per_layer` may hold one value per layer
HF_FACT_LIMITS: dict[str, Limit] = {
    "expert_count": EXPERTS,
    "expert_used_count": EXPERTS,
    "expert_ff": DIM,
    "expert_shared_ff": DIM,
    "expert_shared_count": EXPERTS,
    "leading_dense": Limit(0, MAX_LAYERS, LAYERS.reason),
}


def check_hf_config(cfg: dict[str, Any], where: str) -> None:
    """Range-check a (merged) config.json. Raises ModelFormatError naming the key."""
    hint = "config.json is corrupt or not a real model's; download it again"
    archs = cfg.get("architectures")
    if archs is not None and (not isinstance(archs, list) or not all(isinstance(a, str) for a in archs)):
        raise ModelFormatError(f"{where}: architectures = {describe(archs)} is not a list of names", hint)
    for key in ("model_type", "_name_or_path"):
        if cfg.get(key) is not None and not isinstance(cfg[key], str):
            raise ModelFormatError(f"{where}: {key} = {describe(cfg[key])} is not a string", hint)
    for key, limit in HF_LIMITS.items():
        if key in cfg and cfg[key] is not None:
            check_int(cfg[key], f"{where}: {key}", limit, ModelFormatError, hint)
    if "num_hidden_layers" in cfg and cfg["num_hidden_layers"] is not None:
        check_int(cfg["num_hidden_layers"], f"{where}: num_hidden_layers", LAYERS, ModelFormatError, hint)
    from moeplan.planner.model import registry  # the architectures' tables, loaded when a config is read

    found = registry.of_config(cfg)
    if found is not None:
        _check_hf_facts(cfg, where, found[0].hf, hint)


def _check_hf_facts(cfg: dict[str, Any], where: str, keys: HfKeys, hint: str) -> None:
    """The MoE facts of a config, read under the architecture's own names: each within its
    limit (a per-layer list entry by entry, and uniform as the converter requires), at least
    one expert per token, and no more than the model has."""
    for fact, limit in HF_FACT_LIMITS.items():
        for key in keys.names(fact):
            value = cfg.get(key)
            if isinstance(value, list) and key in keys.per_layer:
                if len(value) > MAX_LAYERS:
                    raise ModelFormatError(f"{where}: {key} has {len(value)} entries, above the limit {MAX_LAYERS}",
                                           hint)
                for i, v in enumerate(value):
                    check_int(v, f"{where}: {key}[{i}]", limit, ModelFormatError, hint)
                if len(set(value)) > 1:
                    raise ModelFormatError(f"{where}: {key} = {describe(value)} differs between layers",
                                           "llama.cpp's converter requires one value for every layer; "
                                           "config.json is not a model it can convert")
            elif value is not None:
                check_int(value, f"{where}: {key}", limit, ModelFormatError, hint)
    n_experts, used = keys.value(cfg, "expert_count"), keys.value(cfg, "expert_used_count")
    used_key = keys.key_of(cfg, "expert_used_count")
    if isinstance(n_experts, int) and n_experts > 0 and isinstance(used, int):
        if used > n_experts:
            raise ModelFormatError(f"{where}: {used_key} = {used} is above the {n_experts} routed experts",
                                   "a token cannot use more experts than the model has; config.json is corrupt")
        if used < 1:
            raise ModelFormatError(f"{where}: {used_key} = {used} with {n_experts} routed experts: a MoE routes "
                                   "each token to at least one expert", hint)


# ---- run shape: flags and plan fields -----------------------------------------------------------

def max_threads(logical_cpus: int | None) -> int:
    return logical_cpus if logical_cpus and logical_cpus > 0 else MAX_THREADS


def check_threads(threads: int, logical_cpus: int | None, field: str = "--threads") -> int:
    hi = max_threads(logical_cpus)
    n = as_int(threads, field, InputError, "for example --threads 16")
    if not 1 <= n <= hi:
        raise InputError(f"{field} = {n} is outside 1..{hi}"
                         + (f" (the machine's {hi} logical CPUs)" if logical_cpus else ""),
                         f"give 1..{hi} threads, for example the number of physical cores")
    return n


def check_ctx(n_ctx: int, field: str = "--ctx", model_name: str = "", model_ctx: int = 0) -> int:
    """A context size within 1..MAX_CTX; the message names the model's own maximum."""
    n = as_int(n_ctx, field, InputError, "for example --ctx 32k")
    if 1 <= n <= MAX_CTX:
        return n
    if n < 1:
        raise InputError(f"{field} = {n} must be at least 1", "for example --ctx 4096 or 32k")
    if model_ctx:
        raise InputError(f"{field} = {n:,} is above {model_name or 'the model'}'s maximum context of "
                         f"{model_ctx:,} tokens (and moeplan's limit of {MAX_CTX:,})",
                         f"give --ctx {model_ctx:,} or less")
    raise InputError(f"{field} = {n:,} is above the limit of {MAX_CTX:,} tokens", "for example --ctx 32k")


def check_run_shape(depth: int, prompt: int, model_name: str = "", model_ctx: int = 0) -> None:
    """--depth and --prompt: shared by estimate and tune."""
    check_int(depth, "--depth", Limit(0, MAX_CTX, CTX.reason), InputError, "for example --depth 8192")
    check_int(prompt, "--prompt", Limit(1, MAX_PROMPT, CTX.reason), InputError, "for example --prompt 512")


# the flag that sets each Placement field (messages about flags name the flag)
FLAG_OF = {"backend": "--backend", "numa": "--numa", "cache_type_k": "--kv-type", "cache_type_v": "--kv-type",
           "n_ctx": "--ctx", "n_ubatch": "--ubatch", "n_threads": "--threads", "n_draft": "--draft",
           "draft_accept": "--accept", "gpu_expert_cache_bytes": "--gpu-expert-cache",
           "n_experts_used": "--experts-used", "cpu_moe_layers": "--cpu-layers", "load_mode": "--no-mmap",
           "n_gpu_layers": "--ngl"}


def check_placement(p: Any, *, where: str = "", model: Any = None, profile: Any = None,
                    logical_cpus: int | None = None) -> None:
    """Every field of a Placement within range; with a model, its layers and experts; with a
    profile, its NUMA nodes and CPUs. Raises InputError naming the field (`where` prefixes it:
    a plan file's path, or '' for flags)."""
    from moeplan.planner.model.ggml import KV_CACHE_TYPES
    from moeplan.planner.placement import BACKENDS, LOAD_MODES, NUMA_POLICIES

    pre = f"{where}: placement." if where else ""
    hint = "re-plan with `moeplan tune`, or fix the value by hand" if where else "see `moeplan tune --help`"

    def f(name: str) -> str:
        return pre + name if where else FLAG_OF.get(name, name)

    for name, allowed in (("backend", BACKENDS), ("numa", NUMA_POLICIES), ("load_mode", LOAD_MODES),
                          ("cache_type_k", KV_CACHE_TYPES), ("cache_type_v", KV_CACHE_TYPES)):
        value = getattr(p, name)
        if value not in allowed:
            raise InputError(f"{f(name)} = {describe(value)} is not one of {', '.join(allowed)}", hint)
    if not 1 <= p.n_ctx <= MAX_CTX:
        model_ctx = getattr(model, "n_ctx_train", 0) if model is not None else 0
        check_ctx(p.n_ctx, f("n_ctx"), getattr(model, "name", ""), model_ctx)
    check_int(p.n_ubatch, f("n_ubatch"), Limit(1, MAX_UBATCH, "compute buffers beyond it exceed any GPU"),
              InputError, "typical values: 512, 1024, 2048, 4096")
    check_int(p.n_batch, f("n_batch"), Limit(1, MAX_BATCH, "llama.cpp's logical batch"), InputError, hint)
    check_int(p.n_seq, f("n_seq"), Limit(1, MAX_SEQ, "parallel sequences"), InputError, hint)
    cpus = logical_cpus or (profile.cpu.n_threads if profile is not None else None)
    check_threads(p.n_threads, cpus, f("n_threads"))
    if p.n_threads_batch:
        check_threads(p.n_threads_batch, cpus, f("n_threads_batch"))
    check_int(p.n_draft, f("n_draft"), Limit(0, MAX_DRAFT, "drafted tokens per step"),
              InputError, "for example --draft 4")
    check_number(p.draft_accept, f("draft_accept"), 0.0, 1.0, InputError,
                 "give the acceptance rate between 0 and 1")
    check_int(p.gpu_expert_cache_bytes, f("gpu_expert_cache_bytes"), Limit(0, MAX_BYTES, "bytes"), InputError, hint)
    check_int(p.n_gpus, f("n_gpus"), Limit(0, MAX_GPUS, "GPUs of one machine"), InputError, hint)
    check_int(p.n_outputs_max, f("n_outputs_max"), Limit(0, MAX_BATCH, "rows of logits"), InputError, hint)
    check_int(p.n_experts_used, f("n_experts_used"), EXPERTS, InputError, hint)
    if p.n_gpu_layers is not None:
        check_int(p.n_gpu_layers, f("n_gpu_layers"), Limit(0, MAX_LAYERS + 1, "llama.cpp -ngl: blocks + the output"),
                  InputError, "the last N layers go to the GPU; N = blocks + 1 offloads every block and the output")
        from moeplan.planner import backends

        if not backends.get(p.backend).gguf_runner:
            raise InputError(f"{f('n_gpu_layers')} {p.n_gpu_layers}: {p.backend} has no plain layer split (-ngl)",
                             "use --backend llama.cpp or ik_llama.cpp, or --cpu-moe-layers")
        if p.n_gpus == 0 and p.n_gpu_layers:
            raise InputError(f"{f('n_gpu_layers')} {p.n_gpu_layers} asks for GPU layers on a CPU-only run",
                             "drop --cpu-only, or use --ngl 0")
    for i, layer in enumerate(p.cpu_moe_layers):
        check_int(layer, f"{f('cpu_moe_layers')}[{i}]", Limit(0, MAX_LAYERS - 1, LAYERS.reason), InputError, hint)
    for i, node in enumerate(p.numa_nodes):
        check_int(node, f"{f('numa_nodes')}[{i}]", Limit(0, MAX_NUMA_NODES - 1, "Linux NUMA node ids"),
                  InputError, hint)
    if model is not None:
        moe = set(model.moe_layer_indices)
        bad = [i for i in p.cpu_moe_layers if i not in moe]
        if bad:
            raise InputError(f"{f('cpu_moe_layers')} names block {bad[0]}, which has no routed experts",
                             f"MoE blocks of {model.name}: {min(moe) if moe else '-'}-{max(moe) if moe else '-'}")
        if p.n_gpus:
            from moeplan.planner.memory.devices import layer_split

            cpu_blocks, _ = layer_split(model, p)
            on_cpu = [i for i in p.cpu_moe_layers if i in cpu_blocks]
            if on_cpu:
                gpu_moe = [i for i in model.moe_layer_indices if i not in cpu_blocks]
                raise InputError(f"{f('cpu_moe_layers')} names block {on_cpu[0]}, which -ngl {p.n_gpu_layers} "
                                 "already keeps entirely on the CPU",
                                 "only experts of GPU blocks can move to the CPU: "
                                 + (f"MoE blocks {gpu_moe[0]}-{gpu_moe[-1]}" if gpu_moe else "there are none"))
        if p.n_experts_used > model.n_experts:
            raise InputError(f"{f('n_experts_used')} = {p.n_experts_used} is above "
                             f"the {model.n_experts} experts of {model.name}",
                             f"{model.n_experts_used} are used by default")
    if profile is not None and p.numa_nodes:
        ids = {n.id for n in profile.numa_nodes}
        bad = [n for n in p.numa_nodes if n not in ids]
        if bad:
            raise InputError(f"{f('numa_nodes')} names NUMA node {bad[0]}, which {profile.name} does not have",
                             "nodes of this machine: " + (", ".join(str(i) for i in sorted(ids)) or "none"))


# ---- hardware profiles --------------------------------------------------------------------------

def check_hardware(profile: Any, where: str) -> None:
    """Every number of a hardware profile finite and in range. Raises ProbeError (exit 4)."""
    hint = "fix the profile, or make one with `moeplan probe --out hw.json` / `moeplan hardware ... --out hw.json`"
    _check_numbers(profile, where + ":", hint)
    if len(profile.gpus) > MAX_GPUS:
        raise ProbeError(f"{where}: {len(profile.gpus)} GPUs, above the limit {MAX_GPUS}", hint)
    if len(profile.numa_nodes) > MAX_NUMA_NODES:
        raise ProbeError(f"{where}: {len(profile.numa_nodes)} NUMA nodes, above the limit {MAX_NUMA_NODES}", hint)
    cpu = profile.cpu
    check_int(cpu.n_cores, f"{where}: cpu.n_cores", Limit(1, MAX_CPUS, "logical CPUs Linux supports"), ProbeError, hint)
    check_int(cpu.n_threads, f"{where}: cpu.n_threads", Limit(1, MAX_CPUS, "logical CPUs Linux supports"),
              ProbeError, hint)
    check_int(cpu.n_sockets, f"{where}: cpu.n_sockets", Limit(1, 64, "sockets of one machine"), ProbeError, hint)
    ids = [n.id for n in profile.numa_nodes]
    for i, nid in enumerate(ids):
        check_int(nid, f"{where}: numa_nodes[{i}].id", Limit(0, MAX_NUMA_NODES - 1, "Linux NUMA node ids"),
                  ProbeError, hint)
    if len(set(ids)) != len(ids):
        raise ProbeError(f"{where}: numa_nodes lists node {next(i for i in ids if ids.count(i) > 1)} twice", hint)
    from moeplan.units import check_plausible_bytes  # sizes written without a unit (issue 32 item 1)

    check_plausible_bytes(profile.system.ram_total_bytes, f"{where}: system.ram_total_bytes", ProbeError)
    for i, n in enumerate(profile.numa_nodes):
        check_plausible_bytes(n.mem_total_bytes, f"{where}: numa_nodes[{i}].mem_total_bytes", ProbeError)
    for i, g in enumerate(profile.gpus):
        check_int(g.vram_bytes, f"{where}: gpus[{i}].vram_bytes", Limit(1, MAX_BYTES, "bytes"), ProbeError, hint)
        check_plausible_bytes(g.vram_bytes, f"{where}: gpus[{i}].vram_bytes", ProbeError)
        if g.numa_node is not None and ids and g.numa_node not in ids:
            raise ProbeError(f"{where}: gpus[{i}].numa_node = {g.numa_node} is not one of the profile's NUMA "
                             f"nodes ({', '.join(map(str, ids))})", hint)


# profile fields whose numbers may be negative: calibration residuals (predicted / measured - 1)
SIGNED_FIELDS = frozenset({"residuals"})


def _check_numbers(obj: Any, path: str, hint: str) -> None:
    """Walk a profile: every int/float >= 0 and finite; every Figure's value > 0 and its
    achievable share in (0, 1]; bytes and counts below MAX_BYTES, rates below MAX_RATE."""
    import dataclasses

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        is_figure = type(obj).__name__ == "Figure"
        for fl in dataclasses.fields(obj):
            value = getattr(obj, fl.name)
            sub = f"{path}.{fl.name}" if not path.endswith(":") else f"{path} {fl.name}"
            if is_figure and fl.name == "value":
                check_number(value, sub, 0.0, MAX_RATE, ProbeError, hint, low_open=True)
            elif is_figure and fl.name == "achievable":
                check_number(value, sub, 0.0, 1.0, ProbeError, hint, low_open=True)
            elif fl.name in ("numa_node",) and value is not None and value < 0:
                raise ProbeError(f"{sub} = {value} must be a node id (>= 0) or null", hint)
            elif fl.name in SIGNED_FIELDS and isinstance(value, dict):
                for k, v in value.items():  # signed, but finite
                    check_number(v, f"{sub}.{k}", -MAX_RATE, MAX_RATE, ProbeError, hint)
            else:
                _check_numbers(value, sub, hint)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _check_numbers(v, f"{path}[{i}]", hint)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                _check_numbers(v, f"{path}.{k}", hint)
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        check_number(obj, path, 0.0, MAX_BYTES if isinstance(obj, int) else MAX_RATE * 1e3, ProbeError, hint)
