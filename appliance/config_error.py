"""The one error a configuration raises, apart from appliance/config.py so that the modules
resolving related keys (appliance/listener_security.py) raise it without importing the config."""


class ConfigError(ValueError):
    """The configuration cannot be used; the message names the key and the reason."""
