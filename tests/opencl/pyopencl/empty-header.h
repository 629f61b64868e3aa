/* what did you expect? */
