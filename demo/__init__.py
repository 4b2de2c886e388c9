"""The demo: a seeded story told through the application, and the perspectives of its agents at each moment."""
