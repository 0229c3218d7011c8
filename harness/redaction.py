"""One secrets policy for every file and stream a run writes (config.json, overrides.json, logs,
stderr, W&B).

Secrets come from the environment only. A config names the VARIABLE that holds a key
(`api_key_env: OPENAI_API_KEY`); it never holds the key itself. So:
- `check_config` refuses a config that carries a value under a secret-looking key name
  (api_key, token, auth_token, authorization, password, *_secret, ...), a URL with credentials
  (`https://user:KEY@host`, `?api-key=KEY`), a near miss of a secret name (`api_kee`), or an `*_env` field whose value is not a variable name (a key
  typed where its variable's name belongs);
- `check_overrides` refuses the same on the command line, hydra.* overrides included;
- `check_env_secrets` refuses a config value holding a secret variable's value, whatever it looks
  like (`hydra.run.dir=.../${oc.env:AZURE_OPENAI_API_KEY}`), by the variable's name;
- `redact` blanks such values in anything written anyway (W&B config, error records),
  `redact_overrides` in overrides.json and W&B's copy of the command line, and `redact_text`
  removes key-shaped strings and the values of secret environment variables from text;
  `install_redaction` applies it to every log record (stderr, run.log) and uncaught traceback.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
import sys
import traceback
from collections.abc import Iterable, Mapping
from typing import Any

from harness.errors import ConfigError

_SECRET_WORDS = (
    "token",
    "secret",
    "password",
    "passwd",
    "authorization",
    "auth",
    "apikey",
    "api_key",
    "key",
    "credential",
    "credentials",
    "cookie",
    "private_key",
)
_SECRET_NAME = re.compile(rf"(^|[_\-.])({'|'.join(_SECRET_WORDS)})$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_URL_CREDENTIALS = re.compile(r"([a-z][a-z0-9+.\-]*://)([^/@\s:]+(?::[^/@\s]*)?)@", re.IGNORECASE)
_URL_QUERY = re.compile(r"(?<=[?&;])([A-Za-z0-9_.\-]+)=([^&#\s;'\"]+)")
_COMPOUNDS = (
    "api_key",
    "apikey",
    "api_token",
    "auth_token",
    "access_token",
    "password",
    "passwd",
    "secret",
    "authorization",
    "credentials",
    "private_key",
    "token",
)
_KEY_SHAPED = re.compile(r"(?<![A-Za-z0-9])(sk-|sk_|hf_|ghp_|xox[abp]-|Bearer\s+)[A-Za-z0-9_\-.]{12,}")
REDACTED = "<redacted>"


def is_secret_key(name: str) -> bool:
    """api_key, hf_token, authorization, auth_token, db_password ... are secret; names of the
    variable holding one (`*_env`) and counts (`max_new_tokens`, `logprob_token_ids`) are not."""
    n = str(name).lower()
    if n.endswith("_env"):
        return False
    return bool(_SECRET_NAME.search(n)) or "password" in n or "secret" in n or "authorization" in n


def is_misspelt_secret_key(name: str) -> bool:
    """A near miss of a secret key name (`api_kee`, `auth_tokn`, `passwrd`): a typo must not let a
    key through to Hydra's error output or multirun.yaml. No key of the shipped schemas is one."""
    n = str(name).lower().replace("-", "_")
    if n.endswith("_env") or is_secret_key(n):
        return False
    return any(difflib.SequenceMatcher(None, n, w).ratio() >= 0.8 for w in _COMPOUNDS)


def is_suspect_key(name: str) -> bool:
    return is_secret_key(name) or is_misspelt_secret_key(name)


def has_url_credentials(value: str) -> bool:
    """`user:KEY@host`, or a secret-named query parameter (`?api-key=KEY`, `&access_token=...`)."""
    return bool(_URL_CREDENTIALS.search(value)) or any(
        is_suspect_key(m.group(1)) for m in _URL_QUERY.finditer(value) if "://" in value[: m.start()]
    )


def looks_like_key(value: str) -> bool:
    return bool(_KEY_SHAPED.search(value))


def is_env_name(value: str) -> bool:
    """A plausible environment-variable NAME, not a key typed in its place. Names are identifiers,
    normally one case with underscores (OPENAI_API_KEY); a long token mixing cases and digits, or a
    long run of letters and digits without an underscore, is a key whatever its prefix."""
    if not _ENV_NAME.match(value) or looks_like_key(value):
        return False
    digits = any(c.isdigit() for c in value)
    mixed = any(c.islower() for c in value) and any(c.isupper() for c in value)
    return not ((mixed and digits and len(value) >= 16) or ("_" not in value and digits and len(value) >= 24))


def check_overrides(overrides: Iterable[str]) -> None:
    """Refuse command-line overrides that carry a secret, including those outside the run config
    (`hydra.job.env_set.OPENAI_API_KEY=...`): the command line reaches shell history, `ps`,
    SLURM's records and W&B's metadata. One line, naming the key, never the value."""
    for o in overrides:
        key, sep, value = str(o).partition("=")
        name = key.lstrip("+~").rsplit(".", 1)[-1]
        if not sep or value in ("", "null"):
            continue
        if is_misspelt_secret_key(name):
            raise ConfigError(
                f"the override {key.lstrip('+~')}=... looks like a misspelt secret key (a config never "
                "holds one); export the key as an environment variable instead and name that "
                "variable in an *_env field"
            )
        if has_url_credentials(value):
            raise ConfigError(
                f"the override {key.lstrip('+~')}=... holds a URL with credentials (user:KEY@ or a "
                "key in the query string); export the key as an environment variable instead and "
                "name that variable in an *_env field (e.g. backend.api_key_env)"
            )
        if is_secret_key(name) or looks_like_key(value):
            raise ConfigError(
                f"the override {key.lstrip('+~')}=... carries a secret; export it as an environment "
                "variable instead and name that variable in an *_env field"
            )


def redact_overrides(overrides: Iterable[str]) -> list[str]:
    """Command-line overrides with the values of secret-named keys blanked (and key-shaped text)."""
    out = []
    for o in overrides:
        key, sep, value = str(o).partition("=")
        name = key.lstrip("+~").rsplit(".", 1)[-1]
        out.append(f"{key}{sep}{REDACTED}" if sep and is_suspect_key(name) else redact_text(str(o)))
    return out


def secret_env_names(names: Iterable[str | None] = ()) -> list[str]:
    """`names` (the config's *_env variables) plus every set environment variable whose name is
    secret-like (OPENAI_API_KEY, HF_TOKEN, WANDB_API_KEY, ...): the values redact_text removes."""
    found = [n for n in names if n]
    found += [n for n, v in os.environ.items() if is_secret_key(n) and len(v) >= 12]
    return list(dict.fromkeys(found))


MIN_SECRET_CHARS = 8
"""Shorter values of secret variables are not looked for in config values (they would match by chance)."""


def check_env_secrets(items: Iterable[tuple[str, str]], env_names: Iterable[str | None] = ()) -> None:
    """Refuse any (key, text) whose text holds the value of a secret variable (secret_env_names), by
    the variable's name: a key that does not look like one (32 hex digits) must not name a folder
    or reach a file either."""
    names = [n for n in secret_env_names(env_names) if len(os.environ.get(n, "")) >= MIN_SECRET_CHARS]
    for key, text in items:
        found = next((n for n in names if os.environ[n] in text), None)
        if found:
            raise ConfigError(
                f"config key {key} holds the value of ${found}, a secret: it would name a folder or "
                f"reach a file; take ${{oc.env:{found}}} out of it (a key is only read from the "
                "variable an *_env field names)"
            )


def env_fields(container: Any) -> list[str]:
    """The values of every *_env field of a config: the variables the run reads keys from."""
    return [str(v) for _, key, v in _walk(container, "") if key.lower().endswith("_env") and v]


class RedactingFilter(logging.Filter):
    """A logging filter that removes secret values from every record it passes (run.log, stderr)."""

    def __init__(self, env_names: Iterable[str | None] = ()) -> None:
        super().__init__()
        self.env_names = list(env_names)

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        clean = redact_text(text, self.env_names)
        if clean != text:
            record.msg, record.args = clean, None
        if record.exc_info:  # the traceback is formatted later: format it now, redacted
            record.exc_text = redact_text(
                logging.Formatter().formatException(record.exc_info), self.env_names
            )
            record.exc_info = None
        return True


def install_redaction(env_names: Iterable[str | None] = ()) -> RedactingFilter:
    """Redact every handler of the root logger (Hydra's console and run.log) and uncaught tracebacks."""
    filt = RedactingFilter(secret_env_names(env_names))
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(filt)
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        text = "".join(traceback.format_exception(kind, value, tb))
        sys.stderr.write(redact_text(text, filt.env_names))

    if getattr(previous, "__name__", "") != "harness_redacting_hook":
        hook.__name__ = "harness_redacting_hook"
        sys.excepthook = hook
    return filt


def _walk(node: Any, path: str) -> Iterable[tuple[str, str, Any]]:
    if isinstance(node, Mapping):
        for k, v in node.items():
            yield from _walk(v, f"{path}{k}.")
            if not isinstance(v, Mapping | list | tuple):
                yield f"{path}{k}", str(k), v
    elif isinstance(node, list | tuple):
        for i, v in enumerate(node):
            yield from _walk(v, f"{path}{i}.")
            if not isinstance(v, Mapping | list | tuple):
                yield f"{path}{i}", str(i), v


def check_config(container: Any, env_names: Iterable[str | None] | None = None) -> None:
    """Refuse (ConfigError, one line, naming the key but never the value) any secret in a config;
    with `env_names` (the config's *_env variables), also the value of any secret variable."""
    if env_names is not None:
        check_env_secrets(
            ((full, str(v)) for full, _, v in _walk(container, "") if isinstance(v, str)), env_names
        )
    for full, key, value in _walk(container, ""):
        if value in (None, "") or isinstance(value, bool | int | float):
            continue
        text = str(value)
        if is_suspect_key(key):
            raise ConfigError(
                f"config key {full} holds a secret; put it in an environment variable and name "
                "that variable in an *_env field instead (e.g. backend.api_key_env=MY_KEY)"
            )
        if has_url_credentials(text):
            raise ConfigError(
                f"config key {full} holds a URL with credentials (user:KEY@host or a key in the query "
                "string); put the key in an environment variable named by api_key_env"
            )
        if key.lower().endswith("_env") and not is_env_name(text):
            raise ConfigError(
                f"config key {full} must name an environment variable (e.g. OPENAI_API_KEY), not "
                "hold a value (this one looks like a key); export the key and put the variable's name "
                "here"
            )
        if looks_like_key(text):
            raise ConfigError(
                f"config key {full} holds what looks like an API key; put it in an environment "
                "variable named by an *_env field"
            )


def redact(obj: Any) -> Any:
    """A copy of a nested config with secret values, URL credentials and key-shaped strings blanked."""
    if isinstance(obj, Mapping):
        return {
            k: (
                REDACTED
                if is_suspect_key(str(k)) and v not in (None, "") and not isinstance(v, Mapping)
                else redact(v)
            )
            for k, v in obj.items()
        }
    if isinstance(obj, list | tuple):
        return [redact(v) for v in obj]
    if isinstance(obj, str):
        return redact_text(obj)
    return obj


def redact_text(text: str, env_names: Iterable[str | None] = ()) -> str:
    """`text` without the values of the named environment variables (and of every set variable with a
    secret-like name, see secret_env_names), URL credentials or key-shaped strings."""
    for name in secret_env_names(env_names):
        value = os.environ.get(name, "") if name else ""
        if len(value) >= 4:
            text = text.replace(value, "***")
    text = _URL_CREDENTIALS.sub(lambda m: m.group(1) + "***@", text)
    text = _URL_QUERY.sub(lambda m: f"{m.group(1)}=***" if is_suspect_key(m.group(1)) else m.group(0), text)
    return _KEY_SHAPED.sub(lambda m: m.group(1) + "***", text)
