"""The directory domain: groups, users and who belongs to which group."""
