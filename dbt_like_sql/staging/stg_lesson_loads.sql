-- When each lesson of the catalogue last changed in the warehouse, removed ones included: load metadata, for the
-- incremental models to find the lessons changed since their last build (a removal sets deleted_at and moves no
-- last_loaded_at).
with

source as (

    select * from {{ source('lms', 'lessons') }}

),

renamed as (

    select
        id as lesson_id,
        greatest(last_loaded_at, deleted_at) as changed_at

    from source

)

select * from renamed
