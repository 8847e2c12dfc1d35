from sage.cli.main import main

main()
