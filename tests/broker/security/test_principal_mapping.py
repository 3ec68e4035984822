"""ssl.principal.mapping.rules parsed and applied as Kafka's SslPrincipalMapper does."""

import pytest

from moldau.broker.security.principal import NoMatchingRule, PrincipalMapper
from moldau.config import ConfigError

SUBJECT = "CN=Alice,OU=ServiceUsers,O=Example,C=CZ"


@pytest.mark.parametrize(("rules", "expected"), [
    ("DEFAULT", SUBJECT),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/", "Alice"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L", "alice"),
    ("RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/U", "ALICE@SERVICEUSERS"),
    ("RULE:^CN=Bob,.*$/bob/, RULE:^CN=(.*?),.*$/user-$1/", "user-Alice"),
    ("RULE:^CN=Bob,.*$/bob/,DEFAULT", SUBJECT),
    ("RULE:^CN=(.*?),OU=Service\\/Users.*$/$1/,RULE:^CN=(A.*?),.*$/$1/L", "alice"),
])
def test_first_matching_rule_names_the_principal(rules, expected):
    assert PrincipalMapper(rules).name_of(SUBJECT) == expected


def test_no_matching_rule_refuses():
    with pytest.raises(NoMatchingRule, match="No rules apply to CN=Alice"):
        PrincipalMapper("RULE:^CN=Bob,.*$/bob/").name_of(SUBJECT)


@pytest.mark.parametrize("rules", ["RULE:^CN=(.*?)$", "NOT A RULE", "RULE:^CN=($/x/"])
def test_invalid_rules_are_config_errors(rules):
    with pytest.raises(ConfigError, match=r"ssl\.principal\.mapping\.rules: Invalid rule"):
        PrincipalMapper(rules)


def test_no_certificate_is_anonymous():
    assert PrincipalMapper("DEFAULT").principal_of_certificate(None) == "User:ANONYMOUS"
