"""Small builders for prometheus-client metric families, so collectors read as a list of
names and values."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.samples import Sample

Labels = Mapping[str, str]


def gauge(name: str, doc: str, value: float | None = None, *,
          series: Iterable[tuple[Labels, float]] = ()) -> GaugeMetricFamily:
    """A gauge with one unlabelled value, or one value per label set."""
    family = GaugeMetricFamily(name, doc)
    if value is not None:
        family.samples.append(Sample(name, {}, value))
    for labels, sample_value in series:
        family.samples.append(Sample(name, dict(labels), sample_value))
    return family


def counter(name: str, doc: str, value: float | None = None, *,
            series: Iterable[tuple[Labels, float]] = ()) -> CounterMetricFamily:
    """A counter (`name` without `_total`): an unlabelled total and/or labelled values, as
    Kafka exposes an all-topics meter beside the per-topic ones under one name."""
    family = CounterMetricFamily(name, doc)
    if value is not None:
        family.samples.append(Sample(f"{name}_total", {}, value))
    for labels, sample_value in series:
        family.samples.append(Sample(f"{name}_total", dict(labels), sample_value))
    return family


def summary(name: str, doc: str, series: Iterable[tuple[Labels, int, float,
                                                         Mapping[str, float]]]) -> Metric:
    """A summary: per label set its count, sum and quantiles (label `quantile`)."""
    family = Metric(name, doc, "summary")
    for labels, count, total, quantiles in series:
        for q, value in quantiles.items():
            family.samples.append(Sample(name, {**labels, "quantile": q}, value))
        family.samples.append(Sample(f"{name}_count", dict(labels), count))
        family.samples.append(Sample(f"{name}_sum", dict(labels), total))
    return family
