"""Every sentence the code writes for people names only the values it is given: each
`{field}` of a phrase's or a refusal's template is one of the call's keyword arguments
(else saying it would fail, or fall back to the English, at the moment it is needed), and
a template without values has no fields. Read from the source, so a misspelt field fails
here rather than in front of a tenant."""

from __future__ import annotations

import ast
import string
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "gpulease"
# The calls that take a template and its values (Makefile: MESSAGE_KEYWORDS); those with
# the template second take a field name first.
FIRST = {"_", "phrase", "DomainError", "NotFound", "Forbidden", "Unauthorized", "Conflict",
         "OutOfStock", "BadGateway", "TooManyRequests", "Gone", "PaymentRequired"}
SECOND = {"InvalidInput", "PricingError", "SizingError"}
# keyword arguments of the refusals that are not values of their sentence
NOT_VALUES = {"retry_after_s"}


def _name(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _template(call: ast.Call, name: str) -> str | None:
    at = 0 if name in FIRST else 1
    if len(call.args) <= at:
        return None
    node = call.args[at]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def test_every_field_of_a_template_is_given() -> None:
    problems: list[str] = []
    checked = 0
    for path in sorted(PACKAGE.rglob("*.py")):
        for call in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(call, ast.Call) or (name := _name(call)) not in FIRST | SECOND:
                continue
            template = _template(call, name)
            if template is None:
                continue
            if any(k.arg is None for k in call.keywords):
                continue  # **values: checked where they are built
            given = {k.arg for k in call.keywords if k.arg} - NOT_VALUES
            if not given:
                continue  # no values: the template is said as written, braces and all
            fields = {f.split(".")[0].split("[")[0]
                      for _, f, _, _ in string.Formatter().parse(template) if f}
            checked += 1
            where = f"{path.relative_to(PACKAGE.parent)}:{call.lineno}"
            if missing := fields - given:
                problems.append(f"{where}: {template!r} names {sorted(missing)}, not given")
            if any(not f.isidentifier() for f in fields):
                problems.append(f"{where}: {template!r}: a field looks into its value")
    assert checked > 300, checked  # the walk found the sentences
    assert not problems, "\n".join(problems)
