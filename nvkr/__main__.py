from nvkr.cli import main

main()
