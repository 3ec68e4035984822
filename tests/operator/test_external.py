"""External listeners: each broker's address from its own Service (a node port, or a load
balancer once it has one), written into the pool's ConfigMap for the broker to advertise."""

from __future__ import annotations

import copy

from moldau.operator.external import ADDRESSES_FILE, resolve
from moldau.operator.objects import desired_objects
from tests.operator.test_objects import BASES, OWNER, SPEC, by_name, cluster


def node_port(port: int) -> dict:
    return {"spec": {"type": "NodePort", "ports": [{"port": 9094, "nodePort": port}]}}


def load_balancer(host: str | None) -> dict:
    ingress = [{"hostname": host}] if host else []
    return {"spec": {"type": "LoadBalancer", "ports": [{"port": 9094}]},
            "status": {"loadBalancer": {"ingress": ingress}}}


def test_node_ports_are_advertised_at_the_pods_node() -> None:
    kc = cluster()
    live = {f"kc-brokers-{i}-external": node_port(31000 + i) for i in range(3)}
    found = resolve(kc, live, {"kc-brokers-0": "10.0.0.1", "kc-brokers-1": "10.0.0.2"})
    assert found.files == {"brokers": ["0.EXTERNAL=:31000", "1.EXTERNAL=:31001",
                                       "2.EXTERNAL=:31002"]}
    assert found.waiting == []
    # kc-brokers-2 has no node yet: not an address to bootstrap from.
    assert found.bootstrap == {"external": ["10.0.0.1:31000", "10.0.0.2:31001"]}
    objects = desired_objects(kc, BASES, OWNER, found)
    config = by_name("ConfigMap", "kc-brokers-config", objects)["data"]
    assert config[ADDRESSES_FILE] == "0.EXTERNAL=:31000\n1.EXTERNAL=:31001\n2.EXTERNAL=:31002\n"
    assert ADDRESSES_FILE not in by_name("ConfigMap", "kc-controllers-config", objects)["data"]
    env = {item["name"]: item for item in by_name("StatefulSet", "kc-brokers", objects)[
        "spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["MOLDAU_NODE_ADDRESS"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.hostIP"}}
    assert env["MOLDAU_EXTERNAL_ADDRESSES"]["value"] == f"/etc/moldau/{ADDRESSES_FILE}"


def test_a_pool_waits_for_its_load_balancers() -> None:
    spec = copy.deepcopy(SPEC)
    spec["listeners"][1]["type"] = "loadbalancer"
    kc = cluster(spec)
    live = {"kc-brokers-0-external": load_balancer("lb-0.example.com"),
            "kc-brokers-1-external": load_balancer(None)}
    found = resolve(kc, live, {})
    assert found.files == {"brokers": ["0.EXTERNAL=lb-0.example.com:9094"]}
    assert found.waiting == ["kc-brokers-1-external", "kc-brokers-2-external"]
    assert found.bootstrap == {"external": ["lb-0.example.com:9094"]}
    names = {(o["kind"], o["metadata"]["name"]) for o in desired_objects(kc, BASES, OWNER, found)}
    assert ("StatefulSet", "kc-controllers") in names
    assert ("StatefulSet", "kc-brokers") not in names
    live.update({f"kc-brokers-{i}-external": load_balancer(f"lb-{i}.example.com")
                 for i in (1, 2)})
    found = resolve(kc, live, {})
    assert found.waiting == []
    names = {(o["kind"], o["metadata"]["name"]) for o in desired_objects(kc, BASES, OWNER, found)}
    assert ("StatefulSet", "kc-brokers") in names


def test_new_addresses_restart_no_broker() -> None:
    """The addresses file is outside the config hash: other addresses (a broker added, a
    Service made again) change no pod template."""
    kc = cluster()

    def pod_hash(first_port: int) -> str:
        found = resolve(kc, {f"kc-brokers-{i}-external": node_port(first_port + i)
                             for i in range(3)}, {})
        template = by_name("StatefulSet", "kc-brokers", desired_objects(
            kc, BASES, OWNER, found))["spec"]["template"]
        return template["metadata"]["annotations"]["moldau.io/config-hash"]

    assert pod_hash(31000) == pod_hash(32000)
