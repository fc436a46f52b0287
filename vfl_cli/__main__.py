from vfl_cli.app import main

main()
