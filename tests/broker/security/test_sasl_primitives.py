"""Kafka's JAAS config syntax and the SCRAM exchange (RFC 5802/7677) between the client's
and the broker's halves."""

import pytest

from moldau.broker.security.sasl import AuthenticationFailed, ScramServer
from moldau.config import ConfigError
from moldau.security.jaas import parse_jaas, single_module
from moldau.security.scram import ScramClient, ScramError, new_credential


def test_jaas_entry_with_quoted_and_bare_values_and_comments():
    module = single_module(
        'org.apache.kafka.common.security.plain.PlainLoginModule required\n'
        '  username="admin" /* the broker */ password="a \\"quoted\\" pw"\n'
        '  user_alice="alice-secret" // Alice\n'
        '  user_bob=bob-secret;')
    assert module.class_name == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert module.flag == "required"
    assert module.options == {"username": "admin", "password": 'a "quoted" pw',
                              "user_alice": "alice-secret", "user_bob": "bob-secret"}


def test_several_entries_parse_but_a_property_takes_one():
    text = "a.B required x=1; c.D optional;"
    assert [m.class_name for m in parse_jaas(text)] == ["a.B", "c.D"]
    with pytest.raises(ConfigError, match="contains 2 login modules, should be 1 module"):
        single_module(text)


@pytest.mark.parametrize(("text", "why"), [
    ("a.B required user_x=\"y\"", "Expected ';'"),
    ("a.B mandatory;", "control flag"),
    ("a.B required user_x=;", "Value not specified for key 'user_x'"),
    ("", "not terminated"),
    ("a.B required x=\"1\" & ;", "unexpected '&'"),
])
def test_bad_jaas_configs_say_why_in_one_line(text, why):
    with pytest.raises(ConfigError, match=why) as error:
        parse_jaas(text)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_exchange_succeeds_with_the_password_and_fails_without(mechanism):
    stored = {("alice", mechanism): new_credential(mechanism, "alice-secret")}

    def exchange(user, password):
        client = ScramClient(mechanism, user, password)
        server = ScramServer(mechanism, lambda u, m: stored.get((u, m)))
        final = client.final_message(server.step(client.first_message()))
        client.verify_server_final(server.step(final))
        return server.user

    assert exchange("alice", "alice-secret") == "alice"
    for user, password in (("alice", "wrong"), ("nobody", "alice-secret")):
        with pytest.raises(AuthenticationFailed, match="invalid credentials with SASL "
                           f"mechanism {mechanism}"):
            exchange(user, password)


def test_client_refuses_a_server_without_the_password():
    client = ScramClient("SCRAM-SHA-256", "alice", "alice-secret")
    client.final_message(b"r=" + client.client_nonce.encode() + b"x,s=c2FsdA==,i=4096")
    with pytest.raises(ScramError, match="Invalid server signature"):
        client.verify_server_final(b"v=AAAA")
