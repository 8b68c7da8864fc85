"""The MetricAccess controller: a tenant's declared slice, copied into its Prometheus."""
