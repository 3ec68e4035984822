"""The results table: rows, cells, formatting, the targets and the docs/benchmarks.md page."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

BROKERS = ("moldau", "kafka")


@dataclass
class Cell:
    value: float | None = None
    text: str = ""
    status: str = "not run"  # ok | failed | n/a | not run
    reason: str = ""
    spread: tuple[float, float] | None = None  # lowest and highest of repeated runs

    def show(self, unit: str) -> str:
        if self.status == "ok":
            return self.text or fmt(self.value, unit)
        if self.status == "failed":
            return f"failed: {short(self.reason)}"
        if self.status == "n/a":
            return f"n/a ({self.reason})" if self.reason else "n/a"
        return self.status


@dataclass
class Row:
    id: str
    group: str
    label: str
    unit: str
    better: str  # "higher" | "lower"
    setting: str = ""
    limit: str | None = None  # which machine limit applies: loopback | disk_write | disk_read
    note: str = ""
    cells: dict[str, Cell] = field(default_factory=lambda: {b: Cell() for b in BROKERS})

    def ratio(self) -> float | None:
        moldau, kafka = self.cells["moldau"], self.cells["kafka"]
        if (moldau.status == kafka.status == "ok" and moldau.value is not None
                and kafka.value):
            return moldau.value / kafka.value
        return None


def short(text: str, limit: int = 90) -> str:
    text = " ".join(text.replace("|", "/").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def fmt(value: float | None, unit: str) -> str:
    if value is None or math.isnan(value):
        return "—"
    if unit in ("MiB/s", "MiB"):
        return f"{value:,.0f} {unit}" if value >= 100 else f"{value:,.1f} {unit}"
    if unit == "ms":
        return f"{value:.2f} ms" if value < 10 else f"{value:,.1f} ms"
    if unit == "s":
        return f"{value:.3f} s" if value < 1 else f"{value:,.2f} s"
    return f"{value:,.3g} {unit}"


def size(count: float) -> str:
    if count >= 1024 ** 3:
        return f"{count / 1024 ** 3:.2f} GiB"
    return f"{count / 1024 ** 2:,.0f} MiB"


def rate(records_per_s: float) -> str:
    if records_per_s >= 1e6:
        return f"{records_per_s / 1e6:.2f} M rec/s"
    return f"{records_per_s / 1e3:,.1f} k rec/s"


LIMIT_NAMES = {
    "loopback": "loopback TCP",
    "disk_write": "disk write, fsync at end",
    "disk_dsync": "disk write, O_DSYNC",
    "disk_read": "disk read, cold cache",
}


def limit_text(row: Row, limits: dict[str, float]) -> str:
    if row.limit is None or row.limit not in limits:
        return ""
    bound = limits[row.limit]
    shares = []
    for broker, name in (("moldau", "Moldau"), ("kafka", "Kafka")):
        cell = row.cells[broker]
        if cell.status == "ok" and cell.value is not None:
            shares.append(f"{name} {cell.value / bound:.0%}")
    text = f"{LIMIT_NAMES[row.limit]} {fmt(bound, 'MiB/s')}"
    return f"{text} ({', '.join(shares)})" if shares else text


def table(rows: list[Row], limits: dict[str, float]) -> str:
    header = ["Workload", "Settings", "Moldau", "Kafka", "Moldau/Kafka", "Better",
              "Machine limit"]
    body = []
    for row in rows:
        ratio = row.ratio()
        body.append([row.label, row.setting, row.cells["moldau"].show(row.unit),
                     row.cells["kafka"].show(row.unit),
                     "—" if ratio is None else f"{ratio:.2f}×", row.better,
                     limit_text(row, limits)])
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), rule, *(line(cells) for cells in body)])


@dataclass
class Target:
    name: str
    status: str  # met | missed | not measured
    detail: str


def targets(rows: dict[str, Row], limits: dict[str, float]) -> list[Target]:
    def ok(row_id: str, broker: str) -> float | None:
        cell = rows[row_id].cells[broker] if row_id in rows else None
        return cell.value if cell is not None and cell.status == "ok" else None

    def overlap(row_id: str, factor: float, higher: bool) -> str:
        """A note when the repeated runs of both brokers overlap: a miss inside the noise."""
        row = rows.get(row_id)
        mine = row.cells["moldau"].spread if row else None
        theirs = row.cells["kafka"].spread if row else None
        if mine is None or theirs is None:
            return ""
        inside = (mine[1] >= theirs[0] * factor) if higher else (mine[0] <= theirs[1] * factor)
        return "; within the run-to-run spread" if inside else ""

    found: list[Target] = []
    moldau, kafka = ok("p1k_a1", "moldau"), ok("p1k_a1", "kafka")
    name = "Produce, acks=1, batched 1 KiB records: at least Kafka's"
    if moldau is None or kafka is None:
        found.append(Target(name, "not measured", ""))
    else:
        met = moldau >= kafka
        found.append(Target(name, "met" if met else "missed",
                            f"{fmt(moldau, 'MiB/s')} vs {fmt(kafka, 'MiB/s')} "
                            f"({moldau / kafka:.0%})"
                            + ("" if met else overlap("p1k_a1", 1.0, higher=True))))
    # The fastest reader: the slower ones are then the bottleneck, not the broker.
    hot = [(v, who) for v, who in ((ok("c_hot", "moldau"), "ConsumerPerformance"),
                                   (ok("c_hot_rdk", "moldau"), "librdkafka in Python"),
                                   (ok("c_hot_kcat", "moldau"), "kcat"),
                                   (ok("c_hot_raw", "moldau"), "bare Fetch reader"))
           if v is not None]
    bound = limits.get("loopback")
    name = "Fetch from a hot cache: at least 80% of the loopback limit"
    if not hot or bound is None:
        found.append(Target(name, "not measured", ""))
    else:
        moldau, who = max(hot)
        found.append(Target(name, "met" if moldau >= 0.8 * bound else "missed",
                            f"{fmt(moldau, 'MiB/s')} ({who}) = {moldau / bound:.0%} of "
                            f"{fmt(bound, 'MiB/s')}"))
    moldau, kafka = ok("lat_p99", "moldau"), ok("lat_p99", "kafka")
    name = "p99 end-to-end latency at a moderate rate: no worse than 2× Kafka's"
    if moldau is None or kafka is None:
        found.append(Target(name, "not measured", ""))
    else:
        met = moldau <= 2 * kafka
        found.append(Target(name, "met" if met else "missed",
                            f"{fmt(moldau, 'ms')} vs {fmt(kafka, 'ms')} "
                            f"({moldau / kafka:.2f}×)"
                            + ("" if met else overlap("lat_p99", 2.0, higher=False))))
    moldau = ok("startup", "moldau")
    name = "Start-up under 1 s"
    found.append(Target(name, "not measured", "") if moldau is None else
                 Target(name, "met" if moldau < 1 else "missed", fmt(moldau, "s")))
    moldau = ok("rss_rest", "moldau")
    name = "RSS at rest under 80 MiB"
    found.append(Target(name, "not measured", "") if moldau is None else
                 Target(name, "met" if moldau < 80 else "missed", fmt(moldau, "MiB")))
    return found


def targets_table(found: list[Target]) -> str:
    lines = ["| Target | Moldau | Status |", "|---|---|---|"]
    lines += [f"| {t.name} | {t.detail or '—'} | {t.status} |" for t in found]
    return "\n".join(lines)
