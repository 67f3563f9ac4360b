"""Clients of the Overtime service: the browser client (web/, static files) and the `overtime watch` CLI."""
