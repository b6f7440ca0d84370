"""Grades back to the LMS by LTI 1.3 Advantage (issue 54): the course's platform registration
(``settings``), the tool's key and JWKS (``keys``), the token exchange, Assignment and Grade Services
and Names and Role Provisioning Services (``platform``), the durable passback queue and ``attnkit
lms-sync`` (``passback``), and the hub's LTI login (``hub_login``).
"""
