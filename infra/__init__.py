"""What starts and wires real components: settings, the event store adapters, the composition root."""
