"""``python -m carb.characterize``: an alias of ``carb-characterize`` (:mod:`carb.commands.characterize`). Importing it does nothing."""
if __name__ == "__main__":
    from carb.commands.characterize import main

    main()
