"""Shared command-line plumbing: compose a Hydra config, resolve paths, run a command.

``python -m cmpnn_dist.train conf=NAME key=value ...`` composes ``conf/NAME.yaml`` (every
preset extends the structured schema :class:`cmpnn_dist.config.Config`) with the given
overrides through Hydra's compose API.  Any composition error (unknown key, wrong type,
unknown preset) becomes one :class:`UsageError` line and exit status 2; so does a key the
schema does not declare given with Hydra's ``+`` (:mod:`cmpnn_dist.config.keys`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from cmpnn_dist.config import Config, ConfigError, allowed_values, register_configs, validate
from cmpnn_dist.config.keys import check_override_keys
from cmpnn_dist.errors import UsageError

PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # cmpnn_dist/
REPO_ROOT = PACKAGE_ROOT.parent


def conf_dir() -> Path:
    """The preset folder: ``conf/`` beside the package (source checkout or Ray working dir)."""
    for candidate in (Path.cwd() / "conf", REPO_ROOT / "conf"):
        if (candidate / "default.yaml").is_file():
            return candidate.resolve()
    raise UsageError("cannot find the preset folder conf/ (looked in the working dir and repo)")


def default_data_root() -> Path:
    """``../shared/data`` beside the working dir, else beside the repository checkout."""
    for candidate in (Path.cwd().parent / "shared" / "data", REPO_ROOT.parent / "shared" / "data"):
        if candidate.is_dir():
            return candidate.resolve()
    return (Path.cwd().parent / "shared" / "data").resolve()


def available_presets() -> list[str]:
    return sorted(p.stem for p in conf_dir().glob("*.yaml"))


def config_groups() -> dict[str, list[str]]:
    """Hydra config groups under ``conf/`` (``data``, ``model``, ``train``) and their options."""
    root = conf_dir()
    groups = {
        d.name: sorted(p.stem for p in d.glob("*.yaml")) for d in root.iterdir() if d.is_dir()
    }
    return {name: options for name, options in sorted(groups.items()) if options}


def split_args(argv: Sequence[str], special: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """Pull ``name=value`` arguments for the ``special`` names (the command's own options)
    out of ``argv``; the rest are config overrides.  An override whose key is neither is one
    :class:`UsageError` line with the closest option or config key (``topkk=3``: did you mean
    topk?), before anything is read."""
    found: dict[str, str] = {}
    rest: list[str] = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and key in special:
            found[key] = value
        elif arg.startswith("-"):
            raise UsageError(f"unknown option {arg!r}; arguments are Hydra overrides key=value")
        else:
            rest.append(arg)
    check_override_keys([arg for arg in rest if "=" in arg], names=special)
    return found, rest


def int_arg(special: dict[str, str], key: str, default: int | None, low: int = 1) -> int | None:
    """The integer ``special[key]`` (``default`` when absent); a non-integer or a value below
    ``low`` is a :class:`UsageError` naming the key."""
    text = special.get(key)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{key}={text!r}: expected an integer") from None
    if value < low:
        raise UsageError(f"{key}={value}: must be >= {low}")
    return value


def compose_config(preset: str, overrides: Sequence[str]) -> Config:
    """Compose ``conf/<preset>.yaml`` with ``overrides``; returns a typed, resolved Config."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register_configs()
    presets = available_presets()
    if preset not in presets:
        raise UsageError(f"unknown preset conf={preset!r}; choose one of: {', '.join(presets)}")
    check_override_keys(overrides)  # before Hydra, whose `+key` would add an undeclared key
    GlobalHydra.instance().clear()
    user_overrides = list(overrides)
    if not any(o.split("=", 1)[0].lstrip("+~") == "data_root" for o in overrides):
        overrides = [f"data_root={default_data_root()}", *overrides]
    try:
        with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
            cfg = compose(config_name=preset, overrides=list(overrides))
        OmegaConf.resolve(cfg)
        obj = OmegaConf.to_object(cfg)
    except Exception as exc:  # Hydra / OmegaConf errors: keep the message, drop the trace
        given = f" with {' '.join(user_overrides)}" if user_overrides else ""
        raise UsageError(f"config error in conf/{preset}.yaml{given}: {_one_line(exc)}") from exc
    assert isinstance(obj, Config)
    try:
        validate(obj)
    except ConfigError as exc:
        raise UsageError(str(exc)) from exc
    return obj


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    cause = exc.__cause__
    if cause is not None and str(cause).strip() and str(cause).strip() not in text:
        text = f"{text} ({str(cause).strip()})"
    return " ".join(text.split())


def help_text(doc: str | None) -> str:
    """``--help``: the command's docstring, the presets and every config key with its default
    and, for choice fields, the allowed values (read from the schema, so it never drifts)."""
    import dataclasses

    lines = [(doc or "").strip(), "", "presets (conf=NAME): " + ", ".join(available_presets())]
    for group, options in config_groups().items():
        lines.append(f"group {group}={'|'.join(options)}  (replaces the preset's {group} choice)")
    lines += ["", "config keys (key=value; defaults before any preset):"]

    def walk(obj: Any, prefix: str) -> None:
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                walk(value, f"{prefix}{f.name}.")
                continue
            allowed = (
                allowed_values(prefix + f.name, f.metadata) if "choices" in f.metadata else None
            )
            extra = f"  ({' | '.join(map(str, allowed))})" if allowed else ""
            lines.append(f"  {prefix}{f.name}={value!r}{extra}")

    walk(Config(), "")
    return "\n".join(lines)


def plain_text(doc: str) -> str:
    """``doc`` without reStructuredText markup, for a terminal: ``code`` and :role:`target`
    become their text (``~a.b.C`` its last part, ``text <target>`` its text), and a line's
    closing ``::`` (a literal block follows) one colon."""
    import re

    def role(m: re.Match[str]) -> str:
        target = m.group(1)
        shown = re.match(r"(.*?)\s*<[^>]*>$", target)
        if shown:
            return shown.group(1)
        return target.rsplit(".", 1)[-1] if target.startswith("~") else target

    doc = re.sub(r":[a-z]+(?::[a-z]+)?:`([^`]+)`", role, doc)
    doc = re.sub(r"``([^`]+)``", r"\1", doc)
    doc = re.sub(r"`([^`]+)`_{0,2}", r"\1", doc)
    return re.sub(r"(\S)::$", r"\1:", re.sub(r"\s+::$", "", doc, flags=re.M), flags=re.M)


def run_cli(main: Callable[[list[str]], dict[str, Any]], argv: Sequence[str] | None = None) -> int:
    """Run ``main``; print its result as the last stdout line (one JSON object).  ``-h`` /
    ``--help`` prints :func:`help_text` of ``main``'s module instead."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(arg in ("-h", "--help") for arg in argv):
        module = sys.modules[main.__module__]
        if getattr(module, "HELP_CONFIG_KEYS", True):
            print(plain_text(help_text(module.__doc__)))
        else:  # a command without config keys (wl, report): its own usage only
            print(plain_text((module.__doc__ or "").strip()))
        return 0
    try:
        result = main(argv)
    except _user_errors() as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C outside a training loop: nothing to checkpoint
        print("interrupted (Ctrl-C)", file=sys.stderr)
        return 130
    except BaseException as exc:
        # training.interrupt.TrainingInterrupted, sweep.CellsFailed (with its result line)
        status = getattr(exc, "exit_status", None)
        if not isinstance(status, int):
            raise
        print(str(exc), file=sys.stderr, flush=True)
        if isinstance(getattr(exc, "result", None), dict):
            print(json.dumps(exc.result, default=_jsonable), flush=True)
        return status
    print(json.dumps(result, default=_jsonable), flush=True)
    return 0


def _user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that describe bad input (config, data files, checkpoints), not bugs: the one
    library error type, :class:`cmpnn_dist.errors.UsageError`, and its subclasses."""
    return (UsageError,)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item"):
        return obj.item()
    return str(obj)
