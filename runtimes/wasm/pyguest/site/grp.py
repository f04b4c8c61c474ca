"""Access to the sandbox's group database (/etc/group)."""
from hybox_pwd import getgrall, getgrgid, getgrnam, struct_group

__all__ = ["getgrall", "getgrgid", "getgrnam", "struct_group"]
