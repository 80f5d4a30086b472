"""The Kafka wire protocol, sans-IO: bytes in, structures out.

Nothing here touches a socket, a file, a clock or a logger. The appliance and the client
library both build on it; it imports nothing else of ours.
"""
