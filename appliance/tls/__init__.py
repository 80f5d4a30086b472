"""TLS for SSL listeners: Kafka's `ssl.*` settings, the server's SSLContext (reloaded on
SIGHUP), the principal a client certificate names, and Fetch record bytes written through the
TLS transport (sendfile cannot encrypt)."""
