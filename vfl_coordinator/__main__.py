from vfl_coordinator.cli import main

main()
