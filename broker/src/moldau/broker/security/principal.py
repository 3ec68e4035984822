"""Principals: `User:<name>` for each connection, and `ssl.principal.mapping.rules`.

A TLS client's name is its certificate's subject in RFC 2253 form (`CN=alice,OU=x,O=y`),
rewritten by the first rule that matches the whole subject, as Kafka's SslPrincipalMapper
does: `DEFAULT` keeps the subject; `RULE:pattern/replacement/` replaces it with Java's `$1`
group references, an `L` or `U` after the last slash lower- or upper-cases the result.
Rules are separated by commas (a pattern may itself hold commas).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from moldau.config import ConfigError

ANONYMOUS = "User:ANONYMOUS"
USER = "User"

_RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(?:,\s*|$)")
_PARSER = re.compile(_RULE)
_JAVA_GROUP = re.compile(r"\$(\d+)")


class NoMatchingRule(Exception):
    """No mapping rule applies to a certificate's subject: the client is refused."""


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str] | None  # None is DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, subject: str) -> str | None:
        if self.pattern is None:
            return subject
        match = self.pattern.fullmatch(subject)
        if match is None:
            return None
        result = match.expand(self.replacement)
        return result.lower() if self.case == "L" else (
            result.upper() if self.case == "U" else result)


def parse_rules(text: str, key: str = "ssl.principal.mapping.rules") -> list[Rule]:
    rules = []
    text = text.strip()
    for found in _SPLITTER.finditer(text):
        rule_text = found.group(1)
        if not rule_text:
            continue
        parsed = _PARSER.fullmatch(rule_text)
        if parsed is None or (parsed.group(1) is None and parsed.group(2) is None):
            raise ConfigError(f"Invalid value {text} for configuration {key}: "
                              f"Invalid rule: {rule_text}")
        if parsed.group(1):
            rules.append(Rule(None))
            continue
        pattern = parsed.group(2).replace("\\/", "/")
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"Invalid value {text} for configuration {key}: "
                              f"Invalid rule: {rule_text} ({exc})") from None
        replacement = _JAVA_GROUP.sub(r"\\g<\1>", parsed.group(3).replace("\\/", "/"))
        rules.append(Rule(compiled, replacement, parsed.group(4) or ""))
    return rules


class PrincipalMapper:
    def __init__(self, rules_text: str, key: str = "ssl.principal.mapping.rules") -> None:
        self.rules = parse_rules(rules_text, key)

    def name_of(self, subject: str) -> str:
        for rule in self.rules:
            name = rule.apply(subject)
            if name is not None:
                return name
        raise NoMatchingRule(f"No rules apply to {subject}")

    def principal_of_certificate(self, der: bytes | None) -> str:
        """`User:<mapped subject>`, or ANONYMOUS when the client sent no certificate."""
        if not der:
            return ANONYMOUS
        from cryptography import x509  # slow to load; only TLS listeners need it

        subject = x509.load_der_x509_certificate(der).subject.rfc4514_string()
        return f"{USER}:{self.name_of(subject)}"


def host_address(ip: str) -> str:
    """A client's address as ACL hosts name it: Java's InetAddress.getHostAddress() form
    (IPv6 in full with unpadded groups, an IPv4-mapped IPv6 address as IPv4)."""
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return ip
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return ":".join(format(int(group, 16), "x") for group in address.exploded.split(":"))
    return str(address)
