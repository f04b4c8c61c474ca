"""Access to the sandbox's password database (/etc/passwd)."""
from hybox_pwd import getpwall, getpwnam, getpwuid, struct_passwd

__all__ = ["getpwall", "getpwnam", "getpwuid", "struct_passwd"]
