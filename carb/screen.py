"""``python -m carb.screen``: an alias of ``carb-screen`` (:mod:`carb.commands.screen`). Importing it does nothing."""
if __name__ == "__main__":
    from carb.commands.screen import main

    main()
