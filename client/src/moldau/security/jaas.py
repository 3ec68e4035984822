"""`sasl.jaas.config` as Kafka's JaasConfig reads it.

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_alice="alice-secret";

One or more entries, each a login module class, a control flag (required, requisite,
sufficient, optional) and `key=value` options, ended by `;`. Values are words or double-quoted
strings (with backslash escapes); `//` and `/* */` comments are skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from moldau.config import ConfigError

FLAGS = ("required", "requisite", "sufficient", "optional")
_TOKEN = re.compile(r"""
    \s+ | //[^\n]* | /\*.*?\*/                      # skipped
  | (?P<quoted>"(?:\\.|[^"\\])*")
  | (?P<word>[A-Za-z0-9_$.\-]+)
  | (?P<punct>[=;])
  | (?P<bad>.)
""", re.VERBOSE | re.DOTALL)


@dataclass(frozen=True)
class LoginModule:
    class_name: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


def _tokens(text: str, key: str) -> list[tuple[str, str]]:
    tokens = []
    for match in _TOKEN.finditer(text):
        if match["bad"] is not None:
            raise ConfigError(f"Invalid value for configuration {key}: unexpected "
                              f"{match['bad']!r} in the JAAS config")
        if match["quoted"] is not None:
            tokens.append(("value", re.sub(r"\\(.)", r"\1", match["quoted"][1:-1])))
        elif match["word"] is not None:
            tokens.append(("word", match["word"]))
        elif match["punct"] is not None:
            tokens.append((match["punct"], match["punct"]))
    if "/*" in text and text.count("/*") > text.count("*/"):
        raise ConfigError(f"Invalid value for configuration {key}: unterminated comment")
    return tokens


def parse_jaas(text: str, key: str = "sasl.jaas.config") -> list[LoginModule]:
    tokens = _tokens(text, key)
    modules: list[LoginModule] = []
    at = 0

    def fail(why: str) -> ConfigError:
        return ConfigError(f"Invalid value for configuration {key}: {why}")

    while at < len(tokens):
        kind, class_name = tokens[at]
        if kind != "word":
            raise fail("Login module not specified in JAAS config")
        if at + 1 >= len(tokens) or tokens[at + 1][1].lower() not in FLAGS:
            raise fail(f"Login module control flag not specified in JAAS config (one of "
                       f"{', '.join(FLAGS)} after {class_name})")
        flag = tokens[at + 1][1].lower()
        at += 2
        options: dict[str, str] = {}
        while at < len(tokens) and tokens[at][0] != ";":
            name_kind, name = tokens[at]
            if name_kind != "word":
                raise fail(f"Invalid JAAS config option near {name!r}")
            if at + 2 >= len(tokens) or tokens[at + 1][0] != "=" \
                    or tokens[at + 2][0] not in ("word", "value"):
                raise fail(f"Value not specified for key '{name}' in JAAS config")
            options[name] = tokens[at + 2][1]
            at += 3
        if at >= len(tokens):
            raise fail("Expected ';' at the end of the JAAS config entry")
        at += 1
        modules.append(LoginModule(class_name, flag, options))
    if not modules:
        raise fail("JAAS config entry not terminated by semi-colon")
    return modules


def single_module(text: str, key: str = "sasl.jaas.config") -> LoginModule:
    """The one login module a `sasl.jaas.config` property may hold, as Kafka requires."""
    modules = parse_jaas(text, key)
    if len(modules) != 1:
        raise ConfigError(f"Invalid value for configuration {key}: JAAS config property "
                          f"contains {len(modules)} login modules, should be 1 module")
    return modules[0]
