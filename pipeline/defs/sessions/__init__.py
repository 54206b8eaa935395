"""The sessions domain: scheduled lesson sessions and their registrations."""
