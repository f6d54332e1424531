"""Air-gapped builds: every locked source exported to a portable directory, imported into a
disconnected machine's store or served from it (``nvkr mirror export|import|serve``).
"""
