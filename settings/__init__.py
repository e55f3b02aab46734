from settings.loader import ConfigError, load_config
from settings.schema import Config

__all__ = ["Config", "ConfigError", "load_config"]
