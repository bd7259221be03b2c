"""The service's HTTP server: adapters' webhooks mount here, next to /healthz."""
