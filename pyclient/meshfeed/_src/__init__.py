"""Private implementation of meshfeed. Nothing here is public API."""
