"""The untrusted side only: the processes that run a student's notebook (the seed and zygote servers,
the fork server, a sandbox's server and its warm IPython shell). Nothing trusted imports this
package; it imports only ``attnkit.boundary`` and the shared base.
"""
