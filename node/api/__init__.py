"""The HTTP API: the app factory, one module per resource, auth, admission, validation and rendering."""
