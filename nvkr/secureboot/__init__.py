"""Secure Boot with the owner's key: the key and its certificate (:mod:`.owner`), kernel module
signatures (:mod:`.modsig`, read by :mod:`.der`) and the action that signs the modules DKMS built
(:mod:`nvkr.builders.signed_modules`); UEFI PE images (:mod:`.pe`: layout, Authenticode digest,
checksum) and their Authenticode signatures (:mod:`.authenticode`)."""
