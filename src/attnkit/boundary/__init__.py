"""What both sides of the trust boundary speak: the wire format (``wire``), the operations a sandbox
serves (``operations``), every limit (``policy``), a call's outcome (``outcome``) and the words for
a student's error (``explain``). The sandbox imports only this and the shared base.
"""
