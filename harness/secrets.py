"""One secrets policy for every file and stream a run writes (config.json, overrides.json, logs,
stderr, W&B).

Secrets come from the environment only. A config names the VARIABLE that holds a key
(`api_key_env: OPENAI_API_KEY`); it never holds the key itself. So:
- `check_config` refuses a config that carries a value under a secret-looking key name
  (api_key, token, auth_token, authorization, password, *_secret, ...), a URL with credentials
  (`https://user:KEY@host`), or an `*_env` field whose value is not a variable name (a key
  typed where its variable's name belongs);
- `redact` blanks such values in anything written anyway (W&B config, error records), and
  `redact_text` removes key-shaped strings and the values of the named variables from text.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from harness.errors import ConfigError

_SECRET_WORDS = ("token", "secret", "password", "passwd", "authorization", "auth", "apikey", "api_key",
                 "key", "credential", "credentials", "cookie", "private_key")
_SECRET_NAME = re.compile(rf"(^|[_\-.])({'|'.join(_SECRET_WORDS)})$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_URL_CREDENTIALS = re.compile(r"([a-z][a-z0-9+.\-]*://)([^/@\s:]+(?::[^/@\s]*)?)@", re.IGNORECASE)
_KEY_SHAPED = re.compile(r"(?<![A-Za-z0-9])(sk-|sk_|hf_|ghp_|xox[abp]-|Bearer\s+)[A-Za-z0-9_\-.]{12,}")
REDACTED = "<redacted>"


def is_secret_key(name: str) -> bool:
    """api_key, hf_token, authorization, auth_token, db_password ... are secret; names of the
    variable holding one (`*_env`) and counts (`max_new_tokens`, `logprob_token_ids`) are not."""
    n = str(name).lower()
    if n.endswith("_env"):
        return False
    return bool(_SECRET_NAME.search(n)) or "password" in n or "secret" in n or "authorization" in n


def has_url_credentials(value: str) -> bool:
    return bool(_URL_CREDENTIALS.search(value))


def looks_like_key(value: str) -> bool:
    return bool(_KEY_SHAPED.search(value))


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


def check_config(container: Any) -> None:
    """Refuse (ConfigError, one line, naming the key but never the value) any secret in a config."""
    for full, key, value in _walk(container, ""):
        if value in (None, "") or isinstance(value, bool | int | float):
            continue
        text = str(value)
        if is_secret_key(key):
            raise ConfigError(f"config key {full} holds a secret; put it in an environment variable and name "
                              "that variable in an *_env field instead (e.g. backend.api_key_env=MY_KEY)")
        if has_url_credentials(text):
            raise ConfigError(f"config key {full} holds a URL with credentials (user:KEY@host); put the key in an "
                              "environment variable named by api_key_env")
        if key.lower().endswith("_env") and (not _ENV_NAME.match(text) or looks_like_key(text)):
            raise ConfigError(f"config key {full} must name an environment variable (e.g. OPENAI_API_KEY), not "
                              "hold a value; export the key and put the variable's name here")
        if looks_like_key(text):
            raise ConfigError(f"config key {full} holds what looks like an API key; put it in an environment "
                              "variable named by an *_env field")


def redact(obj: Any) -> Any:
    """A copy of a nested config with secret values, URL credentials and key-shaped strings blanked."""
    if isinstance(obj, Mapping):
        return {k: (REDACTED if is_secret_key(str(k)) and v not in (None, "") and not isinstance(v, Mapping)
                    else redact(v)) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [redact(v) for v in obj]
    if isinstance(obj, str):
        return redact_text(obj)
    return obj


def redact_text(text: str, env_names: Iterable[str | None] = ()) -> str:
    """`text` without the values of the named environment variables, URL credentials or key-shaped strings."""
    for name in env_names:
        value = os.environ.get(name, "") if name else ""
        if len(value) >= 4:
            text = text.replace(value, "***")
    text = _URL_CREDENTIALS.sub(lambda m: m.group(1) + "***@", text)
    return _KEY_SHAPED.sub(lambda m: m.group(1) + "***", text)
