"""A misspelt config key: the close known key ("did you mean task.docs?") instead of Hydra's advice
to add it with '+' (a key added that way is refused too: nothing reads it).

    one_line_typo("Could not override 'task.doc'. ... Key 'doc' not in 'TaskConf'")
    -> "unknown key task.doc: did you mean task.docs? task has: name, aspect, offset, docs, ..."
"""

from __future__ import annotations

import re

from harness.runtime import experiment_schema, schema

_HYDRA_UNKNOWN = re.compile(r"Could not override '([^']+)'.*?Key '([^']+)' not in '(\w+)'", re.S)


def one_line_typo(message: str) -> str | None:
    """Hydra's error for an override of a key its schema lacks, as one line with the close key and
    the group's keys; None for any other message."""
    found = _HYDRA_UNKNOWN.search(message)
    if found is None:
        return None
    key, _, schema_name = found.groups()
    cls = getattr(schema, schema_name, None) or getattr(experiment_schema, schema_name, None)
    known = schema.schema_fields(cls) if cls is not None else []
    if not known:
        return None
    group = key.rpartition(".")[0] or "the root"
    return f"unknown key {key}: {schema.suggestion(key, known)}{group} has: {', '.join(known)}"
