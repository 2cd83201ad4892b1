"""The build machinery around doit, in the order a build uses it.

- `layout`: where each stage's files live under `build/<recipe>/` (`Artifacts`);
- `stage_table`: the stages of one recipe as calls: function, files read and written, recipe sections keyed;
- `tasks`: those calls as doit tasks; `driver`: runs doit over chosen recipes (`build`);
- `stagerun`: runs one call, from a shared cache or on an executor (`remote`: Dask);
- `state`: the build tree's lock and doit's records; `progress`: the events a build reports;
- `union`: one trimmed runtime for several built recipes.
"""
