"""Every lock-down layer, in the order a sandbox applies them (``sequence``): namespaces, or without
them Landlock, a uid from the pool, a chroot and the seccomp filter, and the cgroup.
"""
