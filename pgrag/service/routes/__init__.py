"""The service's routes, one module per family; :func:`pgrag.service.app.create_app`
includes each module's ``router``."""
