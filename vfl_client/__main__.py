from vfl_client.cli import main

main()
