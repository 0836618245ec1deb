"""Every `--hw` goes through load_hardware: a profile JSON, a preset name, or this machine
(a recent cached probe, else a quick probe that is then cached)."""
from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from moeplan.errors import InputError, ProbeError
from moeplan.io import PRIVATE, write_text_atomic
from moeplan.planner.hardware.profile import SCHEMA_VERSION, HardwareProfile
from moeplan.profiles import catalog

CACHE_ENV = "MOEPLAN_CACHE_DIR"
CACHE_FILE = "hardware-probe.json"
WEEK_S = 7 * 24 * 3600


def write_json_atomic(path: str, data: dict[str, Any], mode: int | None = None) -> None:
    """Stable JSON (sorted keys) written atomically: readers see the old file or the new one.
    mode None: a file the user asked for (0666 less the umask); PRIVATE (0600) for the cache."""
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n", mode)


def profile_json(p: HardwareProfile) -> dict[str, Any]:
    return p.to_dict()


def parse_profile(data: Any, where: str) -> HardwareProfile:
    """Validate a decoded JSON document as a hardware profile."""
    hint = "make one with `moeplan probe --out hw.json` or `moeplan hardware ... --out hw.json`"
    if not isinstance(data, dict) or "schema_version" not in data or "cpu" not in data:
        raise ProbeError(f"{where} is not a moeplan hardware profile", hint)
    version = data.get("schema_version")
    if not isinstance(version, int):
        raise ProbeError(f"{where}: schema_version {version!r} is not a number", hint)
    if version > SCHEMA_VERSION:
        raise ProbeError(f"{where} uses hardware schema {version}; this moeplan reads up to {SCHEMA_VERSION}",
                         "upgrade moeplan (pip install -U moeplan)")
    if version < 1:
        raise ProbeError(f"{where}: unknown hardware schema {version}", hint)
    from moeplan.planner.limits import check_hardware
    from moeplan.planner.serde import SchemaError, check_types

    try:
        check_types(HardwareProfile, data)
        profile = HardwareProfile.from_dict(data)
    except SchemaError as exc:
        raise ProbeError(f"{where}: {exc}", hint) from None
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        raise ProbeError(f"{where}: malformed hardware profile ({type(exc).__name__}: {exc})", hint) from None
    check_hardware(profile, where)
    return profile


MAX_PROFILE_BYTES = 64 * 1024 * 1024  # a probed profile is ~10 kB


def read_profile(path: str) -> HardwareProfile:
    try:
        if os.path.getsize(path) > MAX_PROFILE_BYTES:
            raise ProbeError(f"{path}: {os.path.getsize(path):,} bytes is above the limit {MAX_PROFILE_BYTES:,} "
                             "for a hardware profile", "give a profile written by `moeplan probe --out`")
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as exc:
        raise ProbeError(f"{path} is not valid JSON (line {exc.lineno}: {exc.msg})",
                         "give a profile written by `moeplan probe --out` or `moeplan hardware --out`") from None
    except UnicodeDecodeError:
        raise ProbeError(f"{path} is not a text JSON file", "give a hardware profile JSON") from None
    except (ValueError, RecursionError) as exc:  # NaN/number limits, nesting beyond the parser's depth
        raise ProbeError(f"{path} is not valid JSON ({str(exc)[:80]})", "give a hardware profile JSON") from None
    except OSError as exc:
        raise ProbeError(f"cannot read {path}: {exc.strerror}", "check the path and its permissions") from None
    return parse_profile(data, path)


# ---- the probe cache ---------------------------------------------------------------------------

def cache_dir() -> str:
    env = os.environ.get(CACHE_ENV)
    if env:
        return env
    import platformdirs

    return platformdirs.user_cache_dir("moeplan")


def cache_path() -> str:
    return os.path.join(cache_dir(), CACHE_FILE)


def save_cached(p: HardwareProfile) -> tuple[str | None, str | None]:
    """(path written, None) or (None, warning) when the cache folder is not writable."""
    path = cache_path()
    try:
        write_json_atomic(path, profile_json(p), PRIVATE)
    except (OSError, InputError) as exc:
        why = exc.message if isinstance(exc, InputError) else (exc.strerror or str(exc))
        return None, f"could not cache the probe in {os.path.dirname(path)} ({why}); " \
                     f"set {CACHE_ENV} to a writable folder"
    return path, None


def age_s(p: HardwareProfile, now: datetime) -> float | None:
    try:
        created = datetime.fromisoformat(p.created)
    except ValueError:
        return None
    if created.tzinfo is None:
        created = created.replace(tzinfo=UTC)
    return (now - created).total_seconds()


def read_cached(max_age_s: float, hostname: str, now: datetime | None = None) -> HardwareProfile | None:
    """The cached probe when it is younger than max_age_s and from this host, else None."""
    path = cache_path()
    if not os.path.exists(path):
        return None
    try:
        p = read_profile(path)
    except ProbeError:
        return None  # a junk cache is as good as none: it will be overwritten
    age = age_s(p, now or datetime.now(UTC))
    if p.origin != "probe" or age is None or age < 0 or age > max_age_s:
        return None
    if hostname and p.system.hostname and p.system.hostname != hostname:
        return None
    return p


def _hostname() -> str:
    import platform

    from moeplan.probes.fsread import read_text

    # os.uname does not exist on Windows; platform.node() is the same name everywhere
    return (read_text("/", "/proc/sys/kernel/hostname") or "").strip() or platform.node()


def load_hardware(arg: str | None, *, max_age_s: float = WEEK_S, allow_probe: bool = True,
                  probe: Callable[[], HardwareProfile] | None = None,
                  say: Callable[[str], None] | None = None) -> HardwareProfile:
    """The hardware profile behind `--hw ARG`.

    arg: a path to a profile JSON, a preset name, or None for this machine (a cached probe
        younger than max_age_s, else a quick probe, cached for next time).
    probe / say: how to probe and where to tell the user (stderr); injectable for tests.
    """
    say = say or (lambda msg: print(msg, file=sys.stderr))
    if arg:
        if os.path.exists(arg) or arg.endswith(".json") or os.sep in arg:
            if not os.path.exists(arg):
                raise ProbeError(f"hardware profile {arg} does not exist",
                                 "check the path, or give a preset name (`moeplan hardware --list`)")
            return read_profile(arg)
        return catalog.load_preset(arg)
    cached = read_cached(max_age_s, _hostname())
    if cached is not None:
        return cached
    if not allow_probe:
        raise ProbeError("no recent probe of this machine",
                         "run `moeplan probe`, or pass --hw with a profile JSON or a preset name")
    say("no recent probe of this machine: probing it now (moeplan probe --quick, about 10 s)")
    if probe is None:
        from moeplan.probes.probe import QUICK, run_probe

        p = run_probe(QUICK)
    else:
        p = probe()
    path, warning = save_cached(p)
    say(f"cached the probe in {path}" if path else f"warning: {warning}")
    return p
