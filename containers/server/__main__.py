from containers.server.main import main

main()
