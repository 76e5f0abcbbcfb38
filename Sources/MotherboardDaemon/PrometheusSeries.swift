import CoreMetrics
import MotherboardCore
import Prometheus

/// The broker's named series in a Prometheus registry of its own, so that several brokers in one
/// process do not mix.
public struct PrometheusSeries: MetricsSeriesStore {
    public let registry = PrometheusCollectorRegistry()

    public init() {}

    public var factory: any MetricsFactory { PrometheusMetricsFactory(registry: registry) }

    public func render() -> String { registry.emitToString() }
}
