"""The certificates domain: the webhook inbox's certificate events loaded into the warehouse."""
