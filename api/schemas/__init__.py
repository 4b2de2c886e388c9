"""Request and response models of the HTTP API: one module per resource, `XCreate` / `XPublic` / `XsPublic`."""
